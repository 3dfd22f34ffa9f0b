"""Data missing from a chain: erased on the record, or withheld (docs/adr/0019-erasure.md).

A form-2 event's data fields are hashed as commitments, their openings (salt and value) kept
beside them; the chain verifies without the openings, so whoever holds a copy can drop them
and every hash still checks.  Only an ``ERASED`` event on the saga's own chain sanctions that:
an opening missing from a saga whose chain records no erasure is *withheld*.  Erasures are
counted from the chain (:func:`counts_as_erasure`), never from a table anyone with database
access can write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from sagacity import _attributes as attr
from sagacity._events import EventType

ERASURE_EVENT = EventType.ERASED
"""The only event type :func:`counts_as_erasure` may count (readers may select on it first)."""


def counts_as_erasure(event_type: str, attributes: Mapping[str, str]) -> bool:
    """Whether an event of a saga's accepted chain records a sanctioned erasure of its data.

    The one place that decides it: every reader that counts erasures (``verify``, ``audit
    watch``) asks here.  Today any ``ERASED`` counts; requiring it to be signed by an
    operator's key is a check to add here.
    """
    del attributes  # the signature check will read them
    return event_type == ERASURE_EVENT


def erased_listing(attributes: Mapping[str, str]) -> dict[int, tuple[str, ...]]:
    """The fields an ``ERASED`` event lists (its ``erased`` attribute), by seq; empty when the
    listing is missing or unreadable."""
    try:
        raw = json.loads(attributes.get(attr.ERASED_FIELDS, "{}"))
        return {int(seq): tuple(str(n) for n in names) for seq, names in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def unopened(commitments: Mapping[str, str], salts: Mapping[str, str]) -> tuple[str, ...]:
    """The data fields of a form-2 event present only as a commitment (no opening), sorted.

    The ``redaction`` attribute (the salts of redacted fields) is not counted: those salts
    never leave the service (docs/adr/0019-erasure.md §5), so a copy handed out without them
    withholds nothing it should hold."""
    return tuple(
        sorted(name for name in commitments if name not in salts and name != attr.REDACTION)
    )


@dataclass(kw_only=True)
class DataAccount:
    """What one saga's chain holds of its data; :meth:`feed` each event in seq order.

    Attributes:
        erasures: events that count as an erasure (:func:`counts_as_erasure`).
        erased_fields: the fields those erasures list.
        first_unopened: the first event with a field present only as a commitment: (seq, its
            fields).
        unopened_events: how many events have such fields.
    """

    erasures: int = 0
    erased_fields: int = 0
    first_unopened: tuple[int, tuple[str, ...]] | None = None
    unopened_events: int = 0
    _listed: set[tuple[int, str]] = field(default_factory=set)

    def feed(
        self,
        seq: int,
        event_type: str,
        attributes: Mapping[str, str],
        commitments: Mapping[str, str],
        salts: Mapping[str, str],
    ) -> None:
        """Account for one event (``commitments`` / ``salts`` empty for form 1)."""
        if counts_as_erasure(event_type, attributes):
            self.erasures += 1
            listed = erased_listing(attributes)
            self._listed.update((s, n) for s, names in listed.items() for n in names)
            self.erased_fields = len(self._listed)
        if commitments:
            missing = unopened(commitments, salts)
            if missing:
                self.unopened_events += 1
                if self.first_unopened is None:
                    self.first_unopened = (seq, missing)

    @property
    def withheld(self) -> tuple[int, tuple[str, ...]] | None:
        """The first event whose data is missing with no erasure on the chain, or ``None``."""
        return None if self.erasures else self.first_unopened

    def describe_withheld(self) -> str | None:
        """The finding's detail, or ``None`` when nothing is withheld."""
        found = self.withheld
        if found is None:
            return None
        seq, names = found
        more = self.unopened_events - 1
        return (
            f"seq {seq} holds {', '.join(names)} only as a commitment (no opening) and the "
            "saga's chain records no ERASED: its data was withheld, not erased"
            + (f" ({more} more event(s) likewise)" if more > 0 else "")
        )
