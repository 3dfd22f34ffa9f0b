"""What the approvals service does as a routed request waits: escalate it, and at its deadline
apply the route's fallback.

Both run on the service's own clock (``Sagacity.now_us``): an escalation from the later of its
first sight of the request (``seen_at_us``) and the request's own time
(:func:`~sagacity.consumers.approvals._routing.age_us`), the deadline as
``Sagacity.approval_deadline_us`` says.  An escalation is journaled
(``APPROVAL_ESCALATED``: the tier, who it adds) once per tier by the replica holding the
request's row lock, so the chain shows when more people were allowed to decide; nothing acts on
that event (who may decide is computed again from the file and the clock at every decision),
so a forged one allows nobody.  The fallback ``reject`` is journaled ``REJECTED`` by
:data:`~sagacity.consumers.approvals._routing.FALLBACK_ACTOR` with the reason, and the saga
ends ``REJECTED``; ``expire`` (the default) is journaled ``EXPIRED`` and the saga ends
``EXPIRED``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sagacity.consumers.approvals._routing import FALLBACK_ACTOR, Route, Routing, age_us
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalNotFound,
    InvalidArgumentError,
    SagacityError,
    TailMovedError,
)
from sagacity.gate._approval import load_chain
from sagacity.gate._requests import request_state
from sagacity.journal import ConditionalJournal
from sagacity.ports import OPEN_STATES, RequestRow
from sagacity.saga._result import SagaResult

if TYPE_CHECKING:
    from sagacity.consumers.approvals._service import ApprovalService

log = logging.getLogger("sagacity.approvals")

FALLBACK_REASON = "no decision by the deadline: the route's fallback is reject"


def apply_fallback(
    service: ApprovalService, saga_id: str, seq: int, seen_at_us: int | None
) -> SagaResult:
    """Close the lapsed request at ``saga_id``/``seq`` as its route says.

    Raises:
        InvalidArgumentError: it has not lapsed (by the service's clock, with the verified
            extensions).
        AlreadyDecidedError / ApprovalNotFound: it is closed / no request.
    """
    s = service.sagacity
    entries = load_chain(s.journal, saga_id)
    state = request_state(entries, seq)
    if state is None:
        raise ApprovalNotFound(f"no approval request at {saga_id}/{seq}", saga_id=saga_id, seq=seq)
    route = service.routing().route(state.request.tool) if service.routing is not None else None
    if route is None or route.fallback == "expire":
        return s.expire(saga_id, seq, seen_at_us=seen_at_us)
    if not state.pending:
        raise AlreadyDecidedError(
            f"cannot reject: {state.describe_closure()}", saga_id=saga_id, seq=seq
        )
    deadline = s.approval_deadline_us(state.request, seen_at_us=seen_at_us, entries=entries)
    if deadline is None or s.now_us() <= deadline:
        raise InvalidArgumentError(
            f"approval request {saga_id}/{seq} has not reached its deadline",
            saga_id=saga_id,
            seq=seq,
        )
    log.info("fallback: rejecting %s/%s at its deadline", saga_id, seq)
    return s.reject(saga_id, seq, FALLBACK_ACTOR, reason=FALLBACK_REASON)


def _recorded(
    entries: list[JournalEntry] | tuple[JournalEntry, ...], seq: int, writer: str
) -> set[int]:
    """The tiers this service already journaled for the request at ``seq``."""
    return {
        int(e.attributes.get(attr.TIER, "0"))
        for e in entries
        if e.event_type is EventType.APPROVAL_ESCALATED
        and e.attributes.get(attr.REF_SEQ) == str(seq)
        and e.actor == writer
        and e.attributes.get(attr.TIER, "").isdigit()
    }


def _journal_tiers(service: ApprovalService, row: RequestRow, route: Route, reached: int) -> int:
    s = service.sagacity
    entries = list(load_chain(s.journal, row.saga_id))
    done = _recorded(entries, row.seq, s.writer_id)
    journaled = 0
    for tier in range(1, reached + 1):
        if tier in done:
            continue
        draft = EntryDraft(
            saga_id=row.saga_id,
            event_type=EventType.APPROVAL_ESCALATED,
            tool=row.tool,
            actor=s.writer_id,
            recorded_at_us=s.now_us(),
            attributes={
                attr.REF_SEQ: str(row.seq),
                attr.POLICY_VERSION: s.policy_version,
                attr.TIER: str(tier),
                attr.ROUTED_TO: ",".join(route.tiers[tier].names()),
            },
        )
        journal = s.journal
        if isinstance(journal, ConditionalJournal):
            entry = journal.append_after(draft, after_seq=entries[-1].seq, durable=True)
        else:
            entry = journal.append(draft, durable=True)
        entries.append(entry)
        journaled += 1
        log.info("escalated %s/%s to tier %d (%s)", row.saga_id, row.seq, tier, draft.attributes)
    return journaled


def escalate_due(service: ApprovalService, routing: Routing) -> int:
    """Journal ``APPROVAL_ESCALATED`` for every open routed request that reached a later tier
    and has no record of it; returns how many were journaled."""
    if not routing.routes:
        return 0
    now = service.sagacity.now_us()
    journaled = 0
    for row in service.store.requests(states=OPEN_STATES):
        route = routing.route(row.tool)
        if route is None or len(route.tiers) < 2 or row.seen_at_us is None:
            continue
        reached = route.reached(age_us(now, row))
        if reached == 0:
            continue
        try:
            with service.store.deciding() as unit:
                if not unit.lock_open(row.saga_id, row.seq):
                    continue
                try:
                    journaled += _journal_tiers(service, row, route, reached)
                finally:
                    unit.fold(row.saga_id, service.sagacity.entries(row.saga_id))
        except TailMovedError:
            continue  # the chain moved: the next sweep looks again
        except SagacityError as exc:
            log.warning("escalation of %s/%s not journaled: %s", row.saga_id, row.seq, exc)
    return journaled
