"""An operator's request to undo a saga that ended: ``sagacity saga compensate``.

A ``COMPENSATION_REQUESTED`` after a saga's end is acted on by the compensation service only
when the operator's key signed it (``_standing.py``, docs/adr/0027-operator-signatures.md).
This journals one, signed for the saga's tail as read, with a compare-and-append.
"""

from __future__ import annotations

from collections.abc import Sequence

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry, now_micros
from sagacity.errors import CompensationRefusedError
from sagacity.journal import ConditionalJournal
from sagacity.ports import ownership
from sagacity.signing._operator_signature import (
    OperatorSigner,
    OperatorVerifier,
    append_signed,
    erasure_counts,
    verifier_with,
)
from sagacity.undo._standing import TERMINAL, standing

MAX_REASON_BYTES = 1024
"""The operator's reason is journaled in clear: a line for people, not a document."""


def _refusal(
    entries: list[JournalEntry], operator: OperatorVerifier, journal: str | None
) -> str | None:
    """Why the saga may not be compensated on the operator's word, or ``None``.  Only an
    ``ERASED`` an operator signed makes it erased: any writer can append one."""
    owner = ownership(entries)
    if owner.live:
        return (
            f"it is live: writer {owner.writer!r} holds it; hand it over with `sagacity saga "
            "takeover` instead"
        )
    if any(erasure_counts(e, operator, journal=journal) for e in entries):
        return "its data was erased: there is nothing left to undo it with"
    pending = standing(entries, operator=operator, journal=journal).request
    if pending is not None:
        return f"a compensation of it is pending (COMPENSATION_REQUESTED at seq {pending.seq})"
    ends = [e for e in entries if e.event_type is EventType.SAGA_ENDED]
    if not ends or ends[-1].result not in TERMINAL:
        said = f"its last SAGA_ENDED says {ends[-1].result}" if ends else "no SAGA_ENDED"
        return f"it has not ended ({said})"
    return None


def request_compensation(
    journal: ConditionalJournal,
    saga_id: str,
    *,
    reason: str,
    actor: str,
    signer: OperatorSigner,
    operator: OperatorVerifier | None = None,
) -> JournalEntry:
    """Journal a ``COMPENSATION_REQUESTED`` for the ended saga, signed by the operator.

    The compensation service (pinning the operator's public key) then undoes the saga's
    executed steps that are not undone yet, exactly once, and ends it again.  ``operator``:
    further pinned operator keys an ``ERASED`` on the chain may be signed with (``signer``'s
    own always counts); an ``ERASED`` none of them signed is ignored.

    Raises:
        CompensationRefusedError: the saga is unknown, live, not ended, erased, already
            pending compensation, or the reason is empty or too long; nothing is journaled.
        TailMovedError: the chain kept moving while being signed (run it again).
        JournalUnavailableError: the topic could not be read or written.
    """
    if not reason.strip():
        raise CompensationRefusedError("the request needs a reason", saga_id=saga_id)
    if len(reason.encode("utf-8")) > MAX_REASON_BYTES:
        raise CompensationRefusedError(
            f"the reason takes more than {MAX_REASON_BYTES} bytes: it is journaled in clear, "
            "keep it to a line (and free of personal data)",
            saga_id=saga_id,
        )

    trusted = verifier_with(signer, operator)
    assert trusted is not None  # the signer's own key at least
    identity = getattr(journal, "identity", None)

    def check(entries: Sequence[JournalEntry]) -> None:
        why = _refusal(list(entries), trusted, identity if isinstance(identity, str) else None)
        if why is not None:
            raise CompensationRefusedError(
                f"saga {saga_id!r} is not compensated: {why}; nothing was journaled",
                saga_id=saga_id,
            )

    if not journal.entries(saga_id):
        raise CompensationRefusedError(f"saga {saga_id!r} is unknown", saga_id=saga_id)
    draft = EntryDraft(
        saga_id=saga_id,
        event_type=EventType.COMPENSATION_REQUESTED,
        actor=actor,
        error=f"compensation requested by {actor}: {reason}",
        attributes={attr.REASON: reason},
        recorded_at_us=now_micros(),
    )
    return append_signed(journal, draft, signer, check=check)
