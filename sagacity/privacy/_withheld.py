"""Data missing from a chain: erased on the record, or withheld (docs/adr/0019-erasure.md).

A form-2 event's data fields are hashed as commitments, their openings (salt and value) kept
beside them; the chain verifies without the openings, so whoever holds a copy can drop them
and every hash still checks.  Only an operator's ``ERASED`` on the saga's own chain sanctions
that: an opening missing from a saga whose chain records no erasure that counts is *withheld*.
Erasures are counted from the chain (:func:`erasure_verdict`), never from a table anyone with
database access can write, and only when an operator signed them (docs/adr/0027): an
``ERASED`` any other writer appended is a ``forged_erasure``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType
from sagacity.signing._operator_signature import OperatorEvent, OperatorVerifier, signature_form

ERASURE_EVENT = EventType.ERASED
"""The only event type :func:`erasure_verdict` may count (readers may select on it first)."""
FORGED_ERASURE = "forged_erasure"
"""The finding of an ``ERASED`` that does not count (every auditor's tool names it so)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ErasureVerdict:
    """Whether an ``ERASED`` counts, and how that was decided.

    Attributes:
        counts: it records a sanctioned erasure of the saga's data.
        verified: its operator signature verified under a pinned key (``False`` when it
            counts only because no key was pinned to check it: *counted unverified*).
        reason: why it does not count (``sagacity.signing._operator_signature.Reason``), else
            ``None``.
    """

    counts: bool
    verified: bool = False
    reason: str | None = None


def erasure_verdict(
    event: OperatorEvent, operator: OperatorVerifier | None, *, journal: str | None = None
) -> ErasureVerdict:
    """Whether an ``ERASED`` of a saga's accepted chain records a sanctioned erasure: the one
    place every auditor's tool decides it (``verify``, ``audit watch``, ``export``; the
    standalone bundle verifier keeps a copy).

    With ``operator`` (the pinned operator keys) it counts only when its operator signature
    verifies at its place in the chain.  Without one it fails open, as the checkpoint keys do
    when none is pinned: an ``ERASED`` with a well-formed operator signature counts
    *unverified* (the tools say so), one with none or a malformed one never counts (every
    ``sagacity erase`` signs its own).  docs/adr/0027-operator-signatures.md says why.
    """
    if event.event_type != ERASURE_EVENT:
        return ErasureVerdict(counts=False, reason="not_an_erasure")
    if operator is not None:
        why = operator.check(event, journal=journal)
        return ErasureVerdict(counts=why is None, verified=why is None, reason=why)
    why = signature_form(event.attributes)
    return ErasureVerdict(counts=why is None, reason=why)


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
    """What one saga's chain holds of its data; :meth:`feed` each event in seq order (and
    :meth:`erasure` each ``ERASED`` as well).

    Args:
        operator: the pinned operator keys an ``ERASED`` must be signed with to count
            (``None``: counted unverified when signed at all, :func:`erasure_verdict`).

    Attributes:
        erasures: events that count as an erasure.
        unverified: those of them counted without a key to verify them.
        forged: ``ERASED`` events that do not count: (seq, why, the writer they name), in
            seq order.
        erased_fields: the fields the erasures that count list.
        first_unopened: the first event with a field present only as a commitment: (seq, its
            fields).
        unopened_events: how many events have such fields.
    """

    operator: OperatorVerifier | None = None
    erasures: int = 0
    unverified: int = 0
    forged: list[tuple[int, str, str | None]] = field(default_factory=list)
    erased_fields: int = 0
    first_unopened: tuple[int, tuple[str, ...]] | None = None
    unopened_events: int = 0
    _listed: set[tuple[int, str]] = field(default_factory=set)

    def erasure(self, event: OperatorEvent) -> None:
        """Account for an ``ERASED`` event: counted, counted unverified, or forged."""
        verdict = erasure_verdict(event, self.operator)
        if not verdict.counts:
            why = verdict.reason or "unsigned_operator_event"
            self.forged.append((event.seq, why, event.attributes.get(attr.WRITER) or None))
            return
        self.erasures += 1
        self.unverified += 0 if verdict.verified else 1
        listed = erased_listing(event.attributes)
        self._listed.update((s, n) for s, names in listed.items() for n in names)
        self.erased_fields = len(self._listed)

    def feed(
        self,
        seq: int,
        event_type: str,
        attributes: Mapping[str, str],
        commitments: Mapping[str, str],
        salts: Mapping[str, str],
    ) -> None:
        """Account for one event's data (``commitments`` / ``salts`` empty for form 1)."""
        del event_type, attributes  # an ERASED is accounted by erasure()
        if commitments:
            missing = unopened(commitments, salts)
            if missing:
                self.unopened_events += 1
                if self.first_unopened is None:
                    self.first_unopened = (seq, missing)

    @property
    def withheld(self) -> tuple[int, tuple[str, ...]] | None:
        """The first event whose data is missing with no erasure that counts on the chain."""
        return None if self.erasures else self.first_unopened

    def describe_withheld(self) -> str | None:
        """The finding's detail, or ``None`` when nothing is withheld."""
        found = self.withheld
        if found is None:
            return None
        seq, names = found
        more = self.unopened_events - 1
        forged = (
            f" (the ERASED at seq {self.forged[0][0]} does not count: {self.forged[0][1]})"
            if self.forged
            else ""
        )
        return (
            f"seq {seq} holds {', '.join(names)} only as a commitment (no opening) and the "
            f"saga's chain records no ERASED that counts{forged}: its data was withheld, not "
            "erased" + (f" ({more} more event(s) likewise)" if more > 0 else "")
        )

    def describe_forged(self) -> str | None:
        """The ``forged_erasure`` finding's detail, or ``None`` when every ``ERASED`` counts."""
        if not self.forged:
            return None
        seq, why, writer = self.forged[0]
        more = len(self.forged) - 1
        return (
            f"the ERASED at seq {seq} is not an operator's ({why}): it does not count as an "
            "erasure and names nobody as the eraser"
            + (f" ({more} more likewise)" if more > 0 else "")
            + (f" (written by writer {writer})" if writer else "")
        )
