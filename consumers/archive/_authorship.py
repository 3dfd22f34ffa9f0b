"""Who may write the evidence: the archive's checks of decision signatures and writers.

Run on ingest, after an event decoded and hashed to its own hash, before it is placed in its
saga's chain (docs/adr/0014-signed-decisions-and-writers.md).  A refused event is quarantined
with the reason, like any other refusal; every later event of its saga is then a ``gap``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, event_type_of
from sagacity.errors import SagacityError
from sagacity.gate._grants import GRANT_EVENTS, archive_refusal
from sagacity.signing._decision_signature import DECISION_EVENTS, DecisionVerifier
from sagacity.signing._writer_roles import SagaWriters, writer_refusal
from sagacity.signing._writer_signature import HEADER, WriterRegistry


@dataclass(frozen=True, slots=True)
class _RowEvent:
    """An archive row as the writer rule reads an event."""

    event_type: str
    actor: str | None
    attributes: dict[str, str]

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> _RowEvent:
        return cls(row[2], row[7], json.loads(row[8]) if row[8] != "{}" else {})


@dataclass(frozen=True, kw_only=True)
class Authorship:
    """What the archive requires of an event's author.

    Attributes:
        approvals: the pinned approvals key(s): a decision (``APPROVED``, ``SUSPECT_SETTLED``
            always; ``REJECTED`` / ``EXPIRED`` when signed) whose signature does not verify is
            quarantined
            (``unsigned_decision``, ``bad_decision_signature``, ``unknown_decision_key``,
            ``malformed_decision_signature``); so is a ``GRANTED`` (always) or a signed
            ``GRANT_REVOKED`` whose ``grant_signature`` does not (``unsigned_grant``,
            ``bad_grant_signature``, ``unknown_grant_key``, ``malformed_grant_signature``).
            ``None``: decisions are not checked.
        writers: the writer registry: an event whose ``writer`` is not registered, or whose
            ``sagacity_writer_sig`` header does not verify, is quarantined
            (``unregistered_writer``, ``unsigned_writer``, ``bad_writer_signature``).
            ``None``: any writer is accepted (the default).
    """

    approvals: DecisionVerifier | None = None
    writers: WriterRegistry | None = None

    @property
    def needs_headers(self) -> bool:
        """Whether the consumer must pass each message's headers."""
        return self.writers is not None

    def check(
        self, row: tuple[Any, ...], headers: Mapping[str, bytes] | None
    ) -> tuple[str, str] | None:
        """``None`` when the event (an archive row: saga, seq, type, tool, payload, result,
        error, actor, attributes JSON, time, hash, …) may be archived, else
        ``(reason, detail)``.

        The writer's role is checked later, against the saga's chain
        (:meth:`writer_refusal`)."""
        event_type = row[2]
        decision = self.approvals is not None and (
            event_type in DECISION_EVENTS or event_type in GRANT_EVENTS
        )
        if not decision and self.writers is None:
            return None
        attributes: dict[str, str] = json.loads(row[8]) if row[8] != "{}" else {}
        if self.writers is not None:
            refused = self.writers.check(
                writer=attributes.get(attr.WRITER),
                saga_id=row[0],
                seq=row[1],
                hash=row[10],
                signature=(headers or {}).get(HEADER),
            )
            if refused is not None:
                return refused
        if decision and self.approvals is not None:
            try:
                entry = EntryDraft(
                    saga_id=row[0],
                    event_type=event_type_of(event_type),
                    tool=row[3],
                    result=row[5],
                    actor=row[7],
                    attributes=attributes,
                    recorded_at_us=row[9],
                )
            except SagacityError as exc:
                return "malformed_decision_signature", exc.message
            if event_type in GRANT_EVENTS:
                return self._grant_refusal(self.approvals, entry)
            reason = self.approvals.required(entry)
            if reason is not None:
                return reason, (
                    f"the {event_type} of request seq {attributes.get(attr.REF_SEQ, '?')} "
                    f"by {row[7]!r} is not signed by a pinned approvals key ({reason})"
                )
        return None

    @staticmethod
    def _grant_refusal(approvals: DecisionVerifier, entry: EntryDraft) -> tuple[str, str] | None:
        reason = archive_refusal(approvals, entry)
        if reason is None:
            return None
        return reason, (
            f"the {entry.event_type} of grant {entry.attributes.get(attr.GRANT_ID, '?')} by "
            f"{entry.actor!r} is not signed by a pinned approvals key ({reason})"
        )

    def writer_refusal(self, row: tuple[Any, ...], saga: SagaWriters) -> tuple[str, str] | None:
        """With a writer registry: ``None`` when the event's (registered, verified) writer may
        write it into its saga, whose chain so far folds to ``saga``; else
        ``("writer_not_owner", detail)`` (:func:`sagacity.signing._writer_roles.writer_refusal`)."""
        if self.writers is None:
            return None
        event = _RowEvent.of(row)
        registered = self.writers.registered(event.attributes.get(attr.WRITER))
        if registered is None:  # refused by check() already; never archived
            return "unregistered_writer", "the event's writer is not registered"
        return writer_refusal(registered, saga, event)

    @staticmethod
    def after(saga: SagaWriters, row: tuple[Any, ...]) -> SagaWriters:
        """``saga`` once the event of ``row`` is accepted into its chain."""
        return saga.after(_RowEvent.of(row))
