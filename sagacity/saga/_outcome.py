"""A saga's outcome read back from its chain (for callers whose compensation ran elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence

from sagacity.entries._events import EventType, JournalEntry
from sagacity.gate._requests import pending_requests
from sagacity.saga._result import SagaResult, SagaStatus, Step

_STEP_OUTCOMES = (EventType.COMPENSATED, EventType.COMPENSATION_FAILED, EventType.SUSPECT)


def outcome_from_chain(entries: Sequence[JournalEntry]) -> SagaResult | None:
    """The outcome the chain records: its last ``SAGA_ENDED``, with the compensation's detail.

    Returns ``None`` while no run of the saga has ended.  ``value`` is not journaled, so it is
    ``None``; ``compensated`` / ``dirty`` / ``suspects`` summarise every compensation event.
    """
    ended = [e for e in entries if e.event_type is EventType.SAGA_ENDED]
    if not ended:
        return None
    last = ended[-1]
    try:
        status = SagaStatus(last.result or "")
    except ValueError:
        status = SagaStatus.COMPENSATION_FAILED
    latest: dict[int, JournalEntry] = {}
    call_suspects: dict[int, Step] = {}
    for entry in entries:
        ref = entry.ref_seq
        if ref is None:
            continue
        phase_call = entry.attributes.get("phase") == "call"
        if entry.event_type is EventType.SUSPECT_SETTLED:
            # A person's word closes the suspect; what follows (an undo) tells the rest.
            if phase_call:
                call_suspects.pop(ref, None)
            elif ref in latest and latest[ref].event_type is EventType.SUSPECT:
                del latest[ref]
            continue
        if entry.event_type not in _STEP_OUTCOMES:
            continue
        if entry.event_type is EventType.SUSPECT and phase_call:
            call_suspects[ref] = Step(seq=ref, tool=entry.tool, reason=entry.error or "suspect")
        else:
            latest[ref] = entry
    compensated = tuple(
        seq for seq, e in sorted(latest.items()) if e.event_type is EventType.COMPENSATED
    )
    dirty = tuple(
        Step(seq=seq, tool=e.tool, reason=e.error or "compensation failed")
        for seq, e in sorted(latest.items(), reverse=True)
        if e.event_type is EventType.COMPENSATION_FAILED
    )
    suspects = tuple(call_suspects.values()) + tuple(
        Step(seq=seq, tool=e.tool, reason=e.error or "in doubt")
        for seq, e in sorted(latest.items(), reverse=True)
        if e.event_type is EventType.SUSPECT
    )
    awaiting = pending_requests(entries) if status is SagaStatus.AWAITING_APPROVAL else []
    return SagaResult(
        status=status,
        saga_id=last.saga_id,
        error=last.error or None,
        awaiting_tool_name=awaiting[0].tool if awaiting else None,
        awaiting_seq=awaiting[0].seq if awaiting else None,
        compensated=compensated,
        dirty=dirty,
        suspects=suspects,
    )
