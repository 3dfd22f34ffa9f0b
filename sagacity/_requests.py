"""Approval requests read from a saga's chain: the chain is the only source of gate state.

The ``AWAITING_APPROVAL`` entry *is* the request; decisions refer to it by ``ref_seq``.  Every
journal derives :meth:`Journal.pending_approvals` with :func:`pending_requests`, so gate state
is the same whichever store holds the chain.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sagacity import _attributes as attr
from sagacity._events import EventType, JournalEntry
from sagacity.journal import ApprovalRequest

AWAITING_RESULT = "AWAITING_APPROVAL"
"""``SAGA_ENDED.result`` of a run that left requests open."""


class RequestStatus(enum.StrEnum):
    """Where an approval request stands."""

    PENDING = "pending"
    REJECTED = "rejected"
    EXPIRED = "expired"
    REFUSED = "refused"
    RESUMED = "resumed"
    ENDED = "ended"


_CLOSING = {
    EventType.REJECTED: RequestStatus.REJECTED,
    EventType.EXPIRED: RequestStatus.EXPIRED,
    EventType.RESUME_REFUSED: RequestStatus.REFUSED,
    EventType.CONSTRAINT_VIOLATED: RequestStatus.REFUSED,
    EventType.INTENT: RequestStatus.RESUMED,
}


@dataclass(frozen=True, kw_only=True)
class RequestState:
    """One request and the decisions the chain holds for it.

    Attributes:
        request: the request, with the approvers who signed so far.
        status: pending, or what closed it.
        closed_by: the entry that closed it.
    """

    request: ApprovalRequest
    status: RequestStatus
    closed_by: JournalEntry | None = None

    @property
    def pending(self) -> bool:
        """Still open for decisions and resume."""
        return self.status is RequestStatus.PENDING

    def describe_closure(self) -> str:
        """A sentence saying what closed the request."""
        entry = self.closed_by
        if entry is None:
            return "the request is pending"
        who = f" by {entry.actor}" if entry.actor else ""
        return {
            RequestStatus.REJECTED: f"the request was rejected{who} (seq {entry.seq})",
            RequestStatus.EXPIRED: f"the request expired (seq {entry.seq})",
            RequestStatus.REFUSED: f"a resume of the request was refused (seq {entry.seq})",
            RequestStatus.RESUMED: f"the request was already resumed (seq {entry.seq})",
            RequestStatus.ENDED: f"the saga has ended (seq {entry.seq})",
            RequestStatus.PENDING: "the request is pending",
        }[self.status]


def _int_attr(entry: JournalEntry, key: str, default: int | None) -> int | None:
    raw = entry.attributes.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        return default


def _request(entry: JournalEntry, signed_by: tuple[str, ...]) -> ApprovalRequest:
    return ApprovalRequest(
        saga_id=entry.saga_id,
        seq=entry.seq,
        tool=entry.tool or "",
        payload=entry.payload or "",
        payload_sha256=entry.attributes.get(attr.PAYLOAD_SHA256) or None,
        requested_at_us=entry.recorded_at_us,
        # A damaged count must not lower the bar: fall back to the strictest.
        signatures_required=max(1, _int_attr(entry, attr.SIGNATURES_REQUIRED, 2) or 2),
        signed_by=signed_by,
        policy_version=entry.attributes.get(attr.POLICY_VERSION, ""),
        expires_at_us=_int_attr(entry, attr.EXPIRES_AT_US, None),
        reversibility=entry.attributes.get(attr.REVERSIBILITY, ""),
    )


def request_states(entries: Iterable[JournalEntry]) -> list[RequestState]:
    """Every approval request of one saga's chain with its current state, in seq order.

    One pass over the chain: a request is closed by the first later entry that refers to it
    with a closing event, or by the first later end of the saga (a ``COMPENSATION_REQUESTED``
    or a ``SAGA_ENDED`` that did not leave requests open); ``APPROVED`` entries before that add
    signatures.
    """
    found: dict[int, tuple[JournalEntry, list[str]]] = {}
    closed: dict[int, tuple[RequestStatus, JournalEntry]] = {}
    for entry in entries:
        if entry.event_type is EventType.AWAITING_APPROVAL:
            found[entry.seq] = (entry, [])
            continue
        if entry.event_type is EventType.COMPENSATION_REQUESTED or (
            entry.event_type is EventType.SAGA_ENDED and entry.result != AWAITING_RESULT
        ):
            for seq in found:
                closed.setdefault(seq, (RequestStatus.ENDED, entry))
            continue
        ref = entry.ref_seq
        if ref is None or ref not in found or ref in closed:
            continue
        if entry.event_type is EventType.APPROVED and entry.actor:
            found[ref][1].append(entry.actor)
        elif isinstance(entry.event_type, EventType) and entry.event_type in _CLOSING:
            # An event type this release does not know closes nothing here; a resume refuses
            # a request followed by one (it may have closed it).
            closed[ref] = (_CLOSING[entry.event_type], entry)
    states: list[RequestState] = []
    for seq in sorted(found):
        entry, signed = found[seq]
        status, closed_by = closed.get(seq, (RequestStatus.PENDING, None))
        states.append(
            RequestState(request=_request(entry, tuple(signed)), status=status, closed_by=closed_by)
        )
    return states


def request_state(entries: Sequence[JournalEntry], seq: int) -> RequestState | None:
    """The request at ``seq`` (``None`` when ``seq`` is not an ``AWAITING_APPROVAL`` entry)."""
    for state in request_states(entries):
        if state.request.seq == seq:
            return state
    return None


def pending_requests(entries: Iterable[JournalEntry]) -> list[ApprovalRequest]:
    """The open requests of one saga's chain, in seq order."""
    return [state.request for state in request_states(entries) if state.pending]


def interrupted_resume(entries: Sequence[JournalEntry], state: RequestState) -> JournalEntry | None:
    """The resumed ``INTENT`` of a request whose resume stopped before the saga's end.

    A resume journals the call's ``INTENT`` (which closes the request), its outcome and then
    ends the saga; a process that died in between leaves the ``INTENT`` with no ``SAGA_ENDED``
    nor ``COMPENSATION_REQUESTED`` after it.  ``None`` when the request was not resumed, or its
    resume ended the saga (or handed it to compensation).
    """
    intent = state.closed_by
    if state.status is not RequestStatus.RESUMED or intent is None:
        return None
    for entry in entries:
        if entry.seq > intent.seq and entry.event_type in (
            EventType.SAGA_ENDED,
            EventType.COMPENSATION_REQUESTED,
        ):
            return None
    return intent
