"""The approvals service's request store: approval requests folded from the journal topic,
the rows a store holds (:class:`RequestRow`, the core's fold), what it quarantines and counts,
and its unit of work for a decision (:class:`RequestDecision`).  Never evidence: the chain is
(docs/adr/0022-request-projection-from-the-core-fold.md).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sagacity.entries import _attributes as attr
from sagacity.entries._events import JournalEntry
from sagacity.gate._requests import RequestState, RequestStatus
from sagacity.journal import ApprovalRequest


class RowState(enum.StrEnum):
    """Where a request stands in a request store (mirrors the chain, lags it at most)."""

    PENDING = "pending"
    """Open, not yet signed by enough people."""
    APPROVED = "approved"
    """Open and fully signed: waiting for resume."""
    REJECTED = "rejected"
    EXPIRED = "expired"
    REFUSED = "refused"
    """A resume was refused (payload changed, constraint) — closed."""
    RESUMED = "resumed"
    ENDED = "ended"
    """The saga ended or was handed to compensation while the request was open."""


OPEN_STATES = ("pending", "approved")
"""The states of a request still open (``pending`` and ``approved``)."""


@dataclass(frozen=True, kw_only=True)
class RequestRow:
    """One approval request as a request store holds it."""

    saga_id: str
    seq: int
    tool: str
    payload: str
    payload_sha256: str | None
    requested_at_us: int
    expires_at_us: int | None
    signatures_required: int
    policy_version: str
    reversibility: str
    state: RowState
    signed_by: tuple[str, ...]
    decision: str | None
    decided_by: str | None
    decided_at_us: int | None
    decision_policy_version: str | None
    closed_at_us: int | None
    entry_hash: str | None = None
    """The request entry's hash (:attr:`ApprovalRequest.entry_hash`): what an approval of this
    row must name."""
    seen_at_us: int | None = field(default=None, compare=False)
    """When the store first folded the request, by the service's clock (``None``: not
    recorded): the service's TTL runs from the earlier of this and ``requested_at_us``
    (:func:`sagacity.gate._requests.deadline_us`).  An observation of the store, not part of the
    chain's fold, so rows compare without it."""
    extended_by_us: int = 0
    """The operator extensions of the request's deadline the store's fold counted (those its
    pinned operator key verifies, :func:`sagacity.gate._deadline_extension.counted_extensions`):
    what the sweep, the inbox and the notices add to the deadline.  A schedule, never a
    decision: an expiry re-derives the deadline from the chain."""

    @classmethod
    def from_state(cls, state: RequestState) -> RequestRow:
        """The row of one request, from its state in the core's fold
        (:func:`sagacity.gate._requests.request_states`): every store holds exactly this.

        Signatures are the fold's approvals (distinct approvers, in order, until fully signed);
        the one that completes the request is the ``approved`` decision.  A rejection or an
        expiry is the decision only when none was made before; every closing event sets
        ``closed_at_us``.
        """
        request = state.request
        closer = state.closed_by
        decision = state.approved_by
        verdict = "approved" if decision is not None else None
        if decision is None and closer is not None:
            verdict = {RequestStatus.REJECTED: "rejected", RequestStatus.EXPIRED: "expired"}.get(
                state.status
            )
            if verdict is not None:
                decision = closer
        if state.status is RequestStatus.PENDING:
            row_state = RowState.APPROVED if verdict == "approved" else RowState.PENDING
        else:
            row_state = RowState(state.status.value)
        return cls(
            saga_id=request.saga_id,
            seq=request.seq,
            tool=request.tool,
            payload=request.payload,
            payload_sha256=request.payload_sha256,
            requested_at_us=request.requested_at_us,
            expires_at_us=request.expires_at_us,
            signatures_required=request.signatures_required,
            policy_version=request.policy_version,
            reversibility=request.reversibility,
            state=row_state,
            signed_by=tuple(a.actor or "" for a in state.approvals),
            decision=verdict,
            decided_by=decision.actor if decision is not None else None,
            decided_at_us=decision.recorded_at_us if decision is not None else None,
            decision_policy_version=(
                decision.attributes.get(attr.POLICY_VERSION) if decision is not None else None
            ),
            closed_at_us=closer.recorded_at_us if closer is not None else None,
            entry_hash=request.entry_hash,
            extended_by_us=state.extended_by_us,
        )

    @property
    def open(self) -> bool:
        """Pending or approved-awaiting-resume."""
        return self.state in (RowState.PENDING, RowState.APPROVED)

    def request(self) -> ApprovalRequest:
        """The request as the core sees it (for its deadline, for one)."""
        return ApprovalRequest(
            saga_id=self.saga_id,
            seq=self.seq,
            tool=self.tool,
            payload=self.payload,
            payload_sha256=self.payload_sha256,
            requested_at_us=self.requested_at_us,
            signatures_required=self.signatures_required,
            expires_at_us=self.expires_at_us,
            entry_hash=self.entry_hash,
        )

    def to_dict(self) -> dict[str, Any]:
        """The API representation."""
        return {
            "saga_id": self.saga_id,
            "seq": self.seq,
            "tool": self.tool,
            "payload": self.payload,
            "payload_sha256": self.payload_sha256,
            "requested_at_us": self.requested_at_us,
            "expires_at_us": self.expires_at_us,
            "signatures_required": self.signatures_required,
            "policy_version": self.policy_version,
            "reversibility": self.reversibility,
            "state": self.state.value,
            "signed_by": list(self.signed_by),
            "decision": self.decision,
            "decided_by": self.decided_by,
            "decided_at_us": self.decided_at_us,
            "decision_policy_version": self.decision_policy_version,
            "closed_at_us": self.closed_at_us,
            "request_hash": self.entry_hash,
            "extended_by_us": self.extended_by_us,
        }


@dataclass(frozen=True, kw_only=True)
class GateStats:
    """Gate metrics over a window of decision times.

    ``latency`` covers request journaled → deciding event journaled (the signature that
    completed an approval, or the rejection); it does not measure when a person first looked.
    """

    window_s: float
    approved: int
    rejected: int
    expired: int
    pending: int
    oldest_pending_age_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None

    @property
    def approve_ratio(self) -> float | None:
        """approved / (approved + rejected) in the window (``None`` with no decisions)."""
        decided = self.approved + self.rejected
        return self.approved / decided if decided else None

    def to_dict(self) -> dict[str, Any]:
        """The API representation."""
        return {
            "window_s": self.window_s,
            "approved": self.approved,
            "rejected": self.rejected,
            "expired": self.expired,
            "pending": self.pending,
            "approve_ratio": self.approve_ratio,
            "oldest_pending_age_s": self.oldest_pending_age_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p95_s": self.latency_p95_s,
            "latency_covers": "request journaled to deciding event journaled "
            "(not time to first look)",
        }


@dataclass(frozen=True, kw_only=True)
class QuarantinedEvent:
    """An event of the topic a projection refused by the acceptance rule
    (:func:`sagacity.chain._acceptance.admit`): never folded, never shown as a request.

    Attributes:
        saga_id / seq: what the event claims (its key's saga, its seq).
        event_type: its type's name.
        kind / detail: why it was refused (:class:`sagacity.chain._acceptance.ForkKind`).
        partition / offset: where it is on the topic (``None`` when folded from elsewhere).
        entry_hash: its recorded hash.
    """

    saga_id: str
    seq: int
    event_type: str
    kind: str
    detail: str
    entry_hash: str
    partition: int | None = None
    offset: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The API representation."""
        return {
            "saga_id": self.saga_id,
            "seq": self.seq,
            "event_type": self.event_type,
            "kind": self.kind,
            "detail": self.detail,
            "hash": self.entry_hash,
            "partition": self.partition,
            "offset": self.offset,
        }


@dataclass(frozen=True, kw_only=True)
class AttentionRow:
    """One saga in the attention queue: its status, what its last run left (``dirty``) and
    since when."""

    saga_id: str
    status: str
    detail: str
    since_us: int
    ended_seq: int


class RequestDecision(Protocol):
    """One decision's unit of work on a request store (:meth:`RequestStore.deciding`).

    What it locks stays locked, and what it folds is kept, until the unit ends: the approvals
    service holds a request's lock while the core decides from the chain and appends to it,
    then folds what was journaled before another decider may look.  The Postgres store runs
    the unit in one transaction (its locks the saga's advisory lock and the row's).
    """

    def get(self, saga_id: str, seq: int, *, lock: bool = False) -> RequestRow | None:
        """The request's row; ``lock`` first takes the saga's and the request's lock for the
        unit, waiting up to the unit's lock timeout.

        Raises:
            DecisionInProgressError: another unit holds the lock past the timeout.
        """
        ...

    def lock_open(self, saga_id: str, seq: int) -> bool:
        """Take the saga's and the open request's lock for the unit without waiting;
        ``False`` when another unit holds either, or the request is not open."""
        ...

    def fold(self, saga_id: str, entries: Sequence[JournalEntry]) -> None:
        """Fold ``entries``, the saga's chain as the journal's reader accepted it (from its
        first event), in the unit: what the store holds already is skipped, the rest judged by
        the acceptance rule and folded as :meth:`RequestStore.apply` folds."""
        ...


@runtime_checkable
class RequestStore(Protocol):
    """Approval requests of one journal topic, folded from its events; never evidence.

    Folding is idempotent (a replayed or repeated event changes nothing: the first event at a
    seq of a saga is the one kept) and the rows are the core's fold
    (:func:`sagacity.gate._requests.request_states`, mapped by :meth:`RequestRow.from_state`): the
    ``AWAITING_APPROVAL`` entry is the request, decisions refer to it by ``ref_seq``,
    ``COMPENSATION_REQUESTED`` or a final ``SAGA_ENDED`` closes whatever is still open before
    it (docs/adr/0005).  A store made with the approvals service's decision verifier counts an
    ``APPROVED`` as a signature only when it verifies as the resume requires
    (:func:`sagacity.gate._requests.verified_by`); without one, every journaled approval counts.  A
    saga whose run ends ``COMPENSATION_FAILED`` enters the attention queue until a later run
    ends in another final status.

    A decision runs in a unit of work (:meth:`deciding`) that holds the request's lock.  A
    store may offer more (the Postgres one: the consumer's position written in the same
    transaction as the rows).
    """

    topic: str
    """The journal topic whose requests the store holds."""

    def migrate(self) -> None:
        """Create the store's tables if they do not exist (safe on every start, concurrently)."""
        ...

    def ping(self) -> None:
        """Raise :class:`~sagacity.errors.PersistenceError` unless the store answers."""
        ...

    def apply(self, entries: Iterable[JournalEntry]) -> None:
        """Fold ``entries`` (in the topic's order) into the store, all or none.

        Each entry passes the acceptance rule first (:func:`sagacity.chain._acceptance.admit`,
        against the tail the store keeps for its saga): only the saga's next linked event is
        folded; a duplicate or an event behind the tail is dropped; anything else (a decoy
        that does not link, a fork, an edited event, a saga first seen past its first event)
        is quarantined with its reason (:meth:`quarantined`) and never shown as a request.

        Raises:
            PersistenceError: the store failed; nothing was folded.
        """
        ...

    def quarantined(
        self, *, saga_id: str | None = None, limit: int = 500
    ) -> list[QuarantinedEvent]:
        """Events refused by the acceptance rule, oldest first (of one saga, or all)."""
        ...

    def get(self, saga_id: str, seq: int) -> RequestRow | None:
        """The request at ``seq`` of ``saga_id``, if folded."""
        ...

    def requests(
        self,
        *,
        states: Sequence[str] = OPEN_STATES,
        tools: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[RequestRow]:
        """Requests in ``states`` (open by default), oldest first; ``tools`` filters by tool."""
        ...

    def decided(self, *, since_us: int) -> list[RequestRow]:
        """Requests decided (approved, rejected, expired) at or after ``since_us``."""
        ...

    def closed(self, states: Sequence[str], *, since_us: int, limit: int = 200) -> list[RequestRow]:
        """Requests closed in ``states`` at or after ``since_us``, newest first."""
        ...

    def overdue(self, now_us: int, ttl_us: int | None, *, limit: int = 100) -> list[RequestRow]:
        """Open requests past their deadline (:func:`sagacity.gate._requests.deadline_us`: their
        own ``expires_at_us``, or ``ttl_us`` after the earlier of ``requested_at_us`` and
        ``seen_at_us``), computed without overflow whatever the rows hold."""
        ...

    def stats(self, *, now_us: int, window_s: float) -> GateStats:
        """Gate metrics for decisions journaled in the last ``window_s`` seconds."""
        ...

    def attention(self, *, limit: int = 500) -> list[AttentionRow]:
        """Sagas whose last run ended ``COMPENSATION_FAILED``, oldest first."""
        ...

    def deciding(
        self, *, lock_timeout_s: float | None = None
    ) -> AbstractContextManager[RequestDecision]:
        """A unit of work for one decision (:class:`RequestDecision`): its locks are released
        and its folds kept when the block ends; ``lock_timeout_s`` bounds how long a locking
        :meth:`RequestDecision.get` waits (``None``: the store's default).

        Raises:
            PersistenceError: the store failed (the Postgres unit then keeps nothing).
        """
        ...
