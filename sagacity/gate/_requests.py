"""Approval requests read from a saga's chain: the chain is the only source of gate state.

The ``AWAITING_APPROVAL`` entry *is* the request; decisions refer to it by ``ref_seq``.  Every
journal derives :meth:`Journal.pending_approvals` with :func:`pending_requests`, so gate state
is the same whichever store holds the chain.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from sagacity.entries import _attributes as attr
from sagacity.entries._bounds import INT64_MAX, INT64_MIN, SIGNATURES_MAX, parse_int, saturating_add
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import ConfigurationError
from sagacity.journal import ApprovalRequest
from sagacity.signing._decision_signature import DecisionVerifier, counts_required

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
CLOSING_EVENTS = frozenset(_CLOSING)
"""The events that close the request their ``ref_seq`` names (docs/adr/0005)."""


class _Attributed(Protocol):
    @property
    def attributes(self) -> Mapping[str, str]: ...


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
    approvals: tuple[JournalEntry, ...] = ()
    """The ``APPROVED`` entries that give the request its signatures, in chain order: one per
    approver, before its closure, until it has the signatures it needs."""
    extended_by_us: int = 0
    """The sum of the deadline extensions the fold counted before the request closed
    (saturating; none unless the fold was given ``extends``)."""

    @property
    def pending(self) -> bool:
        """Still open for decisions and resume."""
        return self.status is RequestStatus.PENDING

    @property
    def approved_by(self) -> JournalEntry | None:
        """The approval that gave the request its last required signature (``None``: the
        request does not have the signatures it needs)."""
        if self.approvals and len(self.approvals) >= self.request.signatures_required:
            return self.approvals[-1]
        return None

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


STRICTEST_SIGNATURES = 2
"""What a request whose ``signatures_required`` is absent or damaged needs: the most any
reversibility declares (a damaged count never lowers the bar)."""


def ref_of(entry: _Attributed) -> int | None:
    """The seq ``entry`` refers to (``ref_seq``); ``None`` when absent, not an integer or not a
    seq (1 to 2^63 - 1), so an entry with a damaged reference refers to nothing."""
    ref = parse_int(entry.attributes.get(attr.REF_SEQ), low=0, high=INT64_MAX)
    return ref if ref is not None and ref >= 1 else None


def signatures_of(entry: _Attributed) -> int:
    """The signatures a request entry claims to need (:func:`signatures_required` of its
    attributes)."""
    return signatures_required(entry.attributes)


def expiry_of(entry: _Attributed) -> int | None:
    """A request entry's own ``expires_at_us``, saturated to the 64-bit range (a deadline
    beyond it never comes, one before it has passed); ``None`` when absent or not an integer
    (the service's TTL alone then bounds the request)."""
    return parse_int(entry.attributes.get(attr.EXPIRES_AT_US), low=INT64_MIN, high=INT64_MAX)


Counts = Callable[[JournalEntry, ApprovalRequest], bool]
"""Whether an ``APPROVED`` entry counts as a signature of a request (see :func:`verified_by`)."""

Extends = Callable[[JournalEntry], bool]
"""Which ``DEADLINE_EXTENDED`` entries move a request's deadline in a fold
(:func:`sagacity.gate._deadline_extension.counted_extensions`: those a pinned operator key
signed)."""


def approval_refusal(
    verifier: DecisionVerifier, approval: JournalEntry, request: ApprovalRequest, *, journal: str
) -> str | None:
    """Why ``approval`` does not count for ``request`` under ``verifier`` (``None``: it does).

    The resume's rule: the approvals service's signature verifies against a pinned key, in
    the bound form naming this ``journal``, the request's entry hash (what the approver was
    shown) and a time not before the request's; and it was signed for the request's payload.
    """
    reason = verifier.bound(
        approval,
        journal=journal,
        request_hash=request.entry_hash or "",
        after_us=request.requested_at_us,
    )
    if reason is None and approval.attributes.get(attr.PAYLOAD_SHA256) != request.payload_sha256:
        reason = "signed for another payload than the request's"
    return reason


def verified_by(verifier: DecisionVerifier | None, *, journal: str) -> Counts | None:
    """The :data:`Counts` of approvals that verify under ``verifier`` on ``journal``
    (:func:`approval_refusal`); ``None`` (every journaled approval counts) without one."""
    if verifier is None:
        return None
    pinned = verifier

    def counts(approval: JournalEntry, request: ApprovalRequest) -> bool:
        return approval_refusal(pinned, approval, request, journal=journal) is None

    return counts


def _closes_all(entry: JournalEntry) -> bool:
    return entry.event_type is EventType.COMPENSATION_REQUESTED or (
        entry.event_type is EventType.SAGA_ENDED and entry.result != AWAITING_RESULT
    )


def affects_requests(entry: JournalEntry) -> bool:
    """Whether :func:`request_states` reads ``entry``: a request, an end of the saga, or a
    decision or closing event that refers to a seq.  The fold of a chain equals the fold of
    the entries of it this accepts."""
    kind = entry.event_type
    if kind is EventType.AWAITING_APPROVAL or _closes_all(entry):
        return True
    if ref_of(entry) is None:
        return False
    if kind is EventType.APPROVED:
        return bool(entry.actor)
    return kind is EventType.DEADLINE_EXTENDED or (isinstance(kind, EventType) and kind in _CLOSING)


def request_input(held: Iterable[JournalEntry], entry: JournalEntry) -> bool:
    """Whether a projection holding ``held`` (the entries of one saga it kept so far) keeps
    ``entry`` to fold the saga's requests: a request, or an entry :func:`affects_requests`
    after one of the saga's requests.  Entries arrive in seq order, and what precedes every
    request closes and signs nothing, so the kept entries fold as the whole chain does."""
    if entry.event_type is EventType.AWAITING_APPROVAL:
        return True
    return affects_requests(entry) and any(
        e.event_type is EventType.AWAITING_APPROVAL and e.seq < entry.seq for e in held
    )


def signatures_required(attributes: Mapping[str, str]) -> int:
    """The signatures a request journals it needs, in their domain (1 to
    :data:`~sagacity.entries._bounds.SIGNATURES_MAX`): absent, not an integer, or below 1 is damaged
    and needs :data:`STRICTEST_SIGNATURES`; above the domain saturates to its top, a count no
    request reaches (fail closed: an impossible count stays impossible, and fits the column)."""
    claimed = parse_int(attributes.get(attr.SIGNATURES_REQUIRED), low=0, high=SIGNATURES_MAX)
    return STRICTEST_SIGNATURES if claimed is None or claimed < 1 else claimed


def _request(entry: JournalEntry, signed_by: tuple[str, ...]) -> ApprovalRequest:
    return ApprovalRequest(
        saga_id=entry.saga_id,
        seq=entry.seq,
        tool=entry.tool or "",
        payload=entry.payload or "",
        payload_sha256=entry.attributes.get(attr.PAYLOAD_SHA256) or None,
        requested_at_us=entry.recorded_at_us,
        signatures_required=signatures_of(entry),
        signed_by=signed_by,
        policy_version=entry.attributes.get(attr.POLICY_VERSION, ""),
        expires_at_us=expiry_of(entry),
        reversibility=entry.attributes.get(attr.REVERSIBILITY, ""),
        entry_hash=entry.hash,
    )


def deadline_us(
    requested_at_us: int,
    *,
    seen_at_us: int | None,
    expires_at_us: int | None,
    ttl_us: int | None,
) -> int | None:
    """When a request lapses (``None``: never): the earlier of its own ``expires_at_us`` and,
    with a service TTL, ``ttl_us`` after the earlier of ``requested_at_us`` (the time the
    requester wrote) and ``seen_at_us`` (when the deciding service first saw the request, by
    its own clock).

    The TTL is a service's policy, so it runs on the service's clock: a requester that dates
    its request in the future gains nothing (the service's first sight bounds it), one that
    dates it in the past only shortens its life; its own ``expires_at_us`` can only shorten
    it too.  The sum saturates at the 64-bit range: no date a writer picks overflows it.
    """
    limits = [] if expires_at_us is None else [expires_at_us]
    if ttl_us is not None:
        start = requested_at_us if seen_at_us is None else min(requested_at_us, seen_at_us)
        limits.append(saturating_add(start, ttl_us))
    return min(limits) if limits else None


class FirstSeen:
    """When this process first read each request (by its entry hash), by its own clock: the
    ``seen_at_us`` of :func:`deadline_us` for a process that keeps no table of its own (a
    resumer, a desk without a request store).

    Kept in memory for the ``size`` requests read last; a process that forgets a request (a
    restart, an eviction) sees it anew, so a request dated in the future lives at most its TTL
    past the latest such sight, never until its own date.
    """

    def __init__(self, clock: Callable[[], int], *, size: int = 65_536) -> None:
        self._clock = clock
        self._size = size
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, request: ApprovalRequest) -> int:
        """When ``request`` was first read here (now, the first time)."""
        key = f"{request.saga_id}\n{request.seq}\n{request.entry_hash or ''}"
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = self._clock()
                while len(self._seen) > self._size:
                    self._seen.popitem(last=False)
            else:
                self._seen.move_to_end(key)
            return seen


def counted_approvals(verifier: DecisionVerifier | None, journal: str | None) -> Counts | None:
    """A request store's :data:`Counts`: :func:`verified_by` on ``journal``.

    Raises:
        ConfigurationError: a ``verifier`` without the journal's name.
    """
    if verifier is None:
        return None
    if not journal:
        raise ConfigurationError(
            "a request store that verifies decisions needs the journal's name (journal=)"
        )
    return verified_by(verifier, journal=journal)


def request_states(
    entries: Iterable[JournalEntry], *, counts: Counts | None = None, extends: Extends | None = None
) -> list[RequestState]:
    """Every approval request of one saga's chain with its current state, in seq order.

    One pass over the chain: a request is closed by the first later entry that refers to it
    with a closing event, or by the first later end of the saga (a ``COMPENSATION_REQUESTED``
    or a ``SAGA_ENDED`` that did not leave requests open); ``APPROVED`` entries before that add
    signatures.  ``counts`` says which ``APPROVED`` entries sign (default: every one with an
    approver; :func:`verified_by` gives the resume's rule); ``extends`` which
    ``DEADLINE_EXTENDED`` entries before the closure add to the request's deadline (default:
    none).
    """
    found: dict[int, tuple[JournalEntry, ApprovalRequest, list[JournalEntry]]] = {}
    closed: dict[int, tuple[RequestStatus, JournalEntry]] = {}
    extended: dict[int, int] = {}
    for entry in entries:
        if entry.event_type is EventType.AWAITING_APPROVAL:
            found[entry.seq] = (entry, _request(entry, ()), [])
            continue
        if _closes_all(entry):
            for seq in found:
                closed.setdefault(seq, (RequestStatus.ENDED, entry))
            continue
        ref = ref_of(entry)
        if ref is None or ref not in found or ref in closed:
            continue
        if entry.event_type is EventType.APPROVED and entry.actor:
            if counts is None or counts(entry, found[ref][1]):
                found[ref][2].append(entry)
        elif entry.event_type is EventType.DEADLINE_EXTENDED:
            by = parse_int(entry.attributes.get(attr.EXTEND_BY_US), low=1, high=INT64_MAX)
            if by is not None and extends is not None and extends(entry):
                extended[ref] = saturating_add(extended.get(ref, 0), by)
        elif isinstance(entry.event_type, EventType) and entry.event_type in _CLOSING:
            # An event type this release does not know closes nothing here; a resume refuses
            # a request followed by one (it may have closed it).
            closed[ref] = (_CLOSING[entry.event_type], entry)
    states: list[RequestState] = []
    for seq in sorted(found):
        entry, request, signed = found[seq]
        status, closed_by = closed.get(seq, (RequestStatus.PENDING, None))
        need = request.signatures_required
        if counts is not None:
            # What the service that signed the counted approvals required (its route's rule).
            need = max([need, *(signed_requirement(a) for a in signed)])
        approvals: list[JournalEntry] = []
        for approval in signed:
            if len(approvals) >= need:
                break
            if all(a.actor != approval.actor for a in approvals):
                approvals.append(approval)
        shown = _request(entry, tuple(a.actor or "" for a in signed))
        states.append(
            RequestState(
                request=replace(shown, signatures_required=need),
                status=status,
                closed_by=closed_by,
                approvals=tuple(approvals),
                extended_by_us=extended.get(seq, 0),
            )
        )
    return states


def signed_requirement(approval: JournalEntry) -> int:
    """The signatures the deciding service required of the request, as ``approval`` says
    where its signature covers it (``SGCD3``, :func:`counts_required`); 0 where it says
    nothing.  Read it only from an approval whose signature verified."""
    if not counts_required(approval):
        return 0
    value = approval.attributes.get(attr.SIGNATURES_REQUIRED)
    return parse_int(value, low=1, high=SIGNATURES_MAX) or 0


def request_state(
    entries: Sequence[JournalEntry], seq: int, *, counts: Counts | None = None
) -> RequestState | None:
    """The request at ``seq`` (``None`` when ``seq`` is not an ``AWAITING_APPROVAL`` entry)."""
    for state in request_states(entries, counts=counts):
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
