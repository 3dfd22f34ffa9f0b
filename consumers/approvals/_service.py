"""Decisions on approval requests, serialised across replicas by the request's row lock.

Each decision runs inside one unit of work of the request store
(:meth:`~sagacity.ports.RequestStore.deciding`; in PostgreSQL one transaction holding the
request row's lock) while the core decides from the saga's chain and appends to it; only then
is the row updated from the chain and the lock released.  Two replicas, or a
double-clicked button, therefore reach the chain one after the other, and the second sees the
first's event.  The table says which requests exist and gives replicas something to lock;
what is allowed is always decided by the core from the chain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sagacity.chain import verify
from sagacity.consumers.approvals._auth import Principal, Role
from sagacity.consumers.approvals._escalation import apply_fallback, escalate_due
from sagacity.consumers.approvals._reads import check_readable
from sagacity.consumers.approvals._routing import Routing, age_us, describe
from sagacity.consumers.approvals._self_approval import refuse_own_request, refuse_own_step
from sagacity.entries._events import JournalEntry
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    ApprovalNotFound,
    InvalidArgumentError,
    PermissionDeniedError,
    SagacityError,
    UnknownSagaError,
    WriterConflictError,
)
from sagacity.gate._approval import load_chain
from sagacity.gate._requests import interrupted_resume, request_state
from sagacity.gate._settlement import suspect_steps
from sagacity.ports import RequestDecision, RequestRow, RequestStore
from sagacity.privacy._disclosure import disclosed
from sagacity.saga._outcome import outcome_from_chain
from sagacity.saga._result import SagaResult
from sagacity.saga._saga import Sagacity
from sagacity.telemetry import _tracing

log = logging.getLogger("sagacity.approvals")

T = TypeVar("T")

_WRITE_ATTEMPTS = 3

_DONE = {"approve": "approved", "reject": "rejected", "resume": "resumed"}
"""A decision span's outcome when the decision ended no saga."""


@dataclass(frozen=True, kw_only=True)
class Decided:
    """What a decision did: the request's row after it, and the saga's result if it ended."""

    request: RequestRow
    result: SagaResult | None = None


class ApprovalService:
    """Approve, reject, resume and expire requests for the tools registered on ``sagacity``.

    Args:
        sagacity: the core, in ``compensation="delegated"`` mode, on the shared journal; its
            ``policy_version`` and ``approval_ttl`` are the policy in force.
        store: the working table.
        lock_timeout_s: how long a decision waits for another one on the same request.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        store: RequestStore,
        *,
        lock_timeout_s: float = 30.0,
        routing: Callable[[], Routing] | None = None,
    ) -> None:
        self.sagacity = sagacity
        self.store = store
        self._lock_timeout_s = lock_timeout_s
        self.routing = routing
        """The principals file's routes, as it is now (``None``: nothing is routed)."""

    # -- reading ----------------------------------------------------------------------------
    def requests(
        self, principal: Principal, *, states: Sequence[str], limit: int = 500
    ) -> list[RequestRow]:
        """Requests in ``states`` for the tools ``principal`` may decide on, oldest first;
        for an approver, only those routed to it now (docs/operations/routing.md)."""
        rows = self.store.requests(states=states, tools=principal.visible_tools(), limit=limit)
        if self.routing is None or principal.role is not Role.APPROVER:
            return rows
        return [row for row in rows if self.routed_refusal(principal, row) is None]

    def get(self, principal: Principal, saga_id: str, seq: int) -> RequestRow:
        """One request (materialised from the chain if the consumer has not caught up).

        Raises:
            ApprovalNotFound / UnknownSagaError: no such request.
            PermissionDeniedError: ``principal`` may not read requests of its tool.
        """
        row = self.store.get(saga_id, seq)
        if row is None:
            with self.store.deciding() as unit:
                row = self._materialise(unit, saga_id, seq)
        if not principal.may_read([row.tool]):
            raise PermissionDeniedError(
                f"{principal.name} may not read requests for tool {row.tool!r}",
                saga_id=saga_id,
                seq=seq,
            )
        return row

    def materialise(self, saga_id: str) -> None:
        """Fold the saga's chain into the table now (what the consumer does as events arrive).

        Raises:
            UnknownSagaError: the saga has no entries.
        """
        with self.store.deciding() as unit:
            unit.fold(saga_id, load_chain(self.sagacity.journal, saga_id))

    def saga(self, principal: Principal, saga_id: str) -> dict[str, Any]:
        """The saga's status, verification verdict, open requests and chain (its entries as
        they may leave the service: :func:`~sagacity.privacy._disclosure.disclosed`).

        Raises:
            UnknownSagaError: the saga has no entries, or ``principal`` may not read it.
        """
        entries = self.sagacity.entries(saga_id)
        check_readable(principal, saga_id, entries)
        verdict = verify(entries, saga_id=saga_id)
        outcome = outcome_from_chain(entries)
        return {
            "saga_id": saga_id,
            "status": outcome.status.value if outcome is not None else "RUNNING",
            "verified": verdict.ok,
            "verification": None
            if verdict.ok
            else {"bad_seq": verdict.bad_seq, "reason": str(verdict.reason)},
            "pending": [
                {"seq": r.seq, "tool": r.tool, "signed_by": list(r.signed_by)}
                for r in self.sagacity.pending_approvals(saga_id)
            ],
            "entries": [disclosed(entry.to_dict()) for entry in entries],
        }

    # -- deciding ---------------------------------------------------------------------------
    def approve(
        self, principal: Principal, saga_id: str, seq: int, *, request_hash: str | None = None
    ) -> Decided:
        """Journal ``APPROVED`` by ``principal`` (through :meth:`Sagacity.approve`), bound to
        ``request_hash``, the request ``principal`` was shown.

        Raises:
            RequestChangedError: ``request_hash`` is not the chain's request (journaled
                ``APPROVAL_REFUSED``; the request stays pending).
            UnderDeclaredRequestError: the request claims fewer signatures than the service's
                declaration of its tool (journaled).
            SelfApprovalError: ``principal`` (or an agent bound to it) made the request.
            InvalidArgumentError: an authenticated ``principal`` named no ``request_hash``.
            AlreadyDecidedError: closed, fully signed, or already signed by ``principal``.
            ApprovalExpiredError: past its deadline (journaled ``EXPIRED``, compensation
                requested).
            as :meth:`get`.
        """

        def act(row: RequestRow) -> SagaResult | None:
            entries = load_chain(self.sagacity.journal, saga_id)
            refuse_own_request(principal, saga_id, entries, seq)
            state = request_state(entries, seq)
            if state is not None and state.pending and self._lapsed(state.request, row, entries):
                # Past its deadline: the route's fallback, never a late approval.
                result = self._expire_one(saga_id, seq, row.seen_at_us)
                raise ApprovalExpiredError(
                    f"approval request {saga_id}/{seq} expired ({result.status.value})",
                    saga_id=saga_id,
                    seq=seq,
                    result=result,
                )
            if request_hash is None and principal.authenticated:
                raise InvalidArgumentError(
                    "request_hash is required: name the request you were shown (its "
                    f"request_hash, GET /sagacity/approvals/{saga_id}/{seq})",
                    saga_id=saga_id,
                    seq=seq,
                )
            self._retrying(
                lambda: self.sagacity.approve(
                    saga_id, seq, principal.name, request_hash=request_hash
                )
            )
            return None

        return self._decide(principal, saga_id, seq, act, kind="approve")

    def reject(
        self, principal: Principal, saga_id: str, seq: int, *, reason: str | None
    ) -> Decided:
        """Journal ``REJECTED`` by ``principal`` and hand the saga to compensation.

        A fully signed request is decided: it can only be resumed (or lapse), so a rejection
        racing the approval that completed it loses with a 409.  A partially signed
        ``PRIVILEGED`` request can still be rejected (the second reviewer's veto).

        Raises: as :meth:`approve`.
        """

        def act(row: RequestRow) -> SagaResult | None:
            entries = load_chain(self.sagacity.journal, saga_id)
            refuse_own_request(principal, saga_id, entries, seq)
            state = request_state(entries, seq)
            if state is None:
                raise ApprovalNotFound(f"no approval request at {saga_id}/{seq}")
            if state.pending and self._lapsed(state.request, row, entries):
                return self._expire_one(saga_id, seq, row.seen_at_us)
            # Only approvals that verify close the door to a rejection: a forged one on the
            # topic must not stop a reviewer's veto.
            verified = self.sagacity.counted_signers(entries, state.request)
            if state.pending and len(verified) >= state.request.signatures_required:
                signers = ", ".join(
                    s for s in dict.fromkeys(state.request.signed_by) if s in verified
                )
                raise AlreadyDecidedError(
                    f"cannot reject: the request was approved by {signers}",
                    saga_id=saga_id,
                    seq=seq,
                )
            return self._retrying(
                lambda: self.sagacity.reject(saga_id, seq, principal.name, reason=reason)
            )

        return self._decide(principal, saga_id, seq, act, kind="reject")

    def resume(self, principal: Principal, saga_id: str, seq: int, payload: str) -> Decided:
        """Run the approved call with ``payload`` (through :meth:`Sagacity.resume_saga`).

        Raises:
            AlreadyDecidedError: the request is closed (rejected, expired, resumed …).
            StepInDoubtError: an earlier resume stopped after the call's ``INTENT`` without an
                outcome: the call is not made again (see :meth:`Sagacity.resume_saga`).
            ApprovalMissingError: ``no human approval recorded`` / too few signatures.
            PayloadMismatchError: ``payload changed since approval`` (journaled, compensation
                requested, the tool not called).
            ConstraintViolation / ApprovalExpiredError / DeclarationError: as the core.
            as :meth:`get`.
        """

        def act(row: RequestRow) -> SagaResult | None:
            entries = load_chain(self.sagacity.journal, saga_id)
            state = request_state(entries, seq)
            if state is None:
                raise ApprovalNotFound(f"no approval request at {saga_id}/{seq}")
            # A resume a crash stopped before the saga's end is finished by the core.
            if not state.pending and interrupted_resume(entries, state) is None:
                raise AlreadyDecidedError(
                    f"cannot resume: {state.describe_closure()}", saga_id=saga_id, seq=seq
                )
            return self.sagacity.resume_saga(saga_id, seq, payload, requested_by=principal.name)

        return self._decide(principal, saga_id, seq, act, kind="resume")

    def settle(
        self, principal: Principal, saga_id: str, seq: int, *, outcome: str, note: str
    ) -> SagaResult:
        """Journal ``principal``'s settlement of the suspect step at ``seq`` (``SUSPECT_SETTLED``).

        The decision path of the gate's decisions: the chain is read and appended to by the
        core (:meth:`Sagacity.settle`, a compare-and-append retried when another writer took
        the tail), then the saga is handed to the compensation service, which undoes a step
        settled ``executed`` exactly once and ends the saga.

        The step's tool is the one its own entry on the chain names (not the ``SUSPECT``'s,
        which any writer could word), and the settlement is decided as a request of that tool
        is: by an approver of the tool, named by its route's tiers when it is routed, who did
        not make the call.

        Raises:
            PermissionDeniedError: ``principal`` may not decide for the step's tool, or the
                tool's route does not name it.
            SelfApprovalError: the call was ``principal``'s (or one of its agents').
            as :meth:`Sagacity.settle`.
        """
        entries = load_chain(self.sagacity.journal, saga_id)
        step = next((e for e in entries if e.seq == seq), None)
        suspected = [s for s in suspect_steps(entries) if s.seq == seq]
        if suspected and step is not None:
            tool = step.tool or suspected[-1].tool or ""
            if not principal.may_decide(tool):
                raise PermissionDeniedError(
                    f"{principal.name} may not settle steps of tool {tool!r}",
                    saga_id=saga_id,
                    seq=seq,
                )
            refusal = self._settlement_refusal(principal, tool)
            if refusal is not None:
                raise PermissionDeniedError(refusal, saga_id=saga_id, seq=seq)
            refuse_own_step(principal, saga_id, step)
        result = self._retrying(
            lambda: self.sagacity.settle(saga_id, seq, outcome, principal.name, note=note)
        )
        log.info("suspect step %s/%s settled %s by %s", saga_id, seq, outcome, principal.name)
        return result

    def sweep(self) -> list[tuple[str, int]]:
        """Journal ``EXPIRED`` for every open request past its deadline; returns those expired.

        Rows another replica is deciding on are skipped (``SKIP LOCKED``) and retried on the
        next sweep.
        """
        expired: list[tuple[str, int]] = []
        now = self.sagacity.now_us()
        if self.routing is not None:
            escalate_due(self, self.routing())
        for row in self.store.overdue(now, self.sagacity.approval_ttl_us):
            try:
                with self.store.deciding() as unit:
                    if not unit.lock_open(row.saga_id, row.seq):
                        continue
                    try:
                        self._expire_one(row.saga_id, row.seq, row.seen_at_us)
                        expired.append((row.saga_id, row.seq))
                        log.info("expired approval request %s/%s", row.saga_id, row.seq)
                    except (
                        AlreadyDecidedError,
                        ApprovalNotFound,
                        UnknownSagaError,
                        InvalidArgumentError,  # not lapsed: e.g. an operator extended it
                    ) as exc:
                        log.info("sweep: %s/%s not expired: %s", row.saga_id, row.seq, exc)
                    finally:
                        self._sync(unit, row.saga_id)
            except SagacityError as exc:
                log.warning("sweep: could not expire %s/%s: %s", row.saga_id, row.seq, exc)
        return expired

    # -- internals --------------------------------------------------------------------------
    def _expire_one(self, saga_id: str, seq: int, seen_at_us: int | None = None) -> SagaResult:
        """Apply the deadline's fallback: its route's (``reject``: journaled ``REJECTED`` by
        :data:`FALLBACK_ACTOR`), else ``EXPIRED`` — once lapsed by the service's own clock."""
        return self._retrying(lambda: apply_fallback(self, saga_id, seq, seen_at_us))

    def _lapsed(self, request: Any, row: RequestRow, entries: Sequence[JournalEntry]) -> bool:
        deadline = self.sagacity.approval_deadline_us(
            request, seen_at_us=row.seen_at_us, entries=entries
        )
        return deadline is not None and self.sagacity.now_us() > deadline

    def routed_to(self, row: RequestRow) -> list[str] | None:
        """Who the routing offers ``row`` to now (``group:finance``, names; the tiers reached
        at its age), ``None`` when its tool is not routed (every approver of the tool)."""
        if self.routing is None:
            return None
        route = self.routing().route(row.tool)
        if route is None:
            return None
        reached = route.reached(age_us(self.sagacity.now_us(), row))
        return [n for t in route.tiers[: reached + 1] for n in t.names()]

    def routed_refusal(self, principal: Principal, row: RequestRow) -> str | None:
        """``None`` when the routing lets ``principal`` decide ``row`` now, else why not."""
        if self.routing is None:
            return None
        routing = self.routing()
        route = routing.route(row.tool)
        age = age_us(self.sagacity.now_us(), row)
        if route is None or route.reaches(principal, age):
            return None
        return (
            f"{principal.name} may not decide this request: requests for tool {row.tool!r} "
            f"are routed to {describe(route, age)}"
        )

    def _settlement_refusal(self, principal: Principal, tool: str) -> str | None:
        """``None`` when the routing lets ``principal`` settle a step of ``tool``: a routed
        tool's steps are settled by whoever any of its tiers names (a step has no waiting
        clock to reach the tiers by), else why not."""
        if self.routing is None:
            return None
        route = self.routing().route(tool)
        if route is None or any(t.reaches(principal) for t in route.tiers):
            return None
        names = ", ".join(n for t in route.tiers for n in t.names())
        return f"{principal.name} may not settle steps of tool {tool!r}: they are routed to {names}"

    def _authorise(self, principal: Principal, row: RequestRow) -> None:
        if not principal.may_decide(row.tool):
            raise PermissionDeniedError(
                f"{principal.name} may not decide requests for tool {row.tool!r}",
                saga_id=row.saga_id,
                seq=row.seq,
            )
        refusal = self.routed_refusal(principal, row)
        if refusal is not None:
            raise PermissionDeniedError(refusal, saga_id=row.saga_id, seq=row.seq)

    def _retrying(self, write: Callable[[], T]) -> T:
        """Run a chain write again when another writer took the seq first.

        The core re-reads the chain on every attempt, so a retry decides on the new tail (and
        refuses if the other write already decided the request).
        """
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                return write()
            except WriterConflictError:
                if attempt == _WRITE_ATTEMPTS:
                    raise
                log.info("chain write lost a race (attempt %d); retrying", attempt)
        raise AssertionError("unreachable")

    def _materialise(self, unit: RequestDecision, saga_id: str, seq: int) -> RequestRow:
        """Fold the saga's chain into the table and return the request's row.

        Raises:
            UnknownSagaError: the saga has no entries.
            ApprovalNotFound: its chain has no request at ``seq``.
        """
        unit.fold(saga_id, load_chain(self.sagacity.journal, saga_id))
        row = unit.get(saga_id, seq)
        if row is None:
            raise ApprovalNotFound(
                f"saga {saga_id!r} has no approval request at seq {seq}", saga_id=saga_id, seq=seq
            )
        return row

    def _traced(
        self, kind: str, row: RequestRow, act: Callable[[RequestRow], SagaResult | None]
    ) -> SagaResult | None:
        """``act(row)`` in the decision's span, which continues the request event's trace."""
        journal = self.sagacity.journal
        with _tracing.decision(kind, row.saga_id, row.seq, row.tool, journal) as span:
            result = act(row)
            span.outcome = result.status.value if result is not None else _DONE[kind]
            return result

    def _sync(self, unit: RequestDecision, saga_id: str) -> None:
        unit.fold(saga_id, self.sagacity.entries(saga_id))

    def _decide(
        self,
        principal: Principal,
        saga_id: str,
        seq: int,
        act: Callable[[RequestRow], SagaResult | None],
        *,
        kind: str,
    ) -> Decided:
        failure: SagacityError | None = None
        result: SagaResult | None = None
        with self.store.deciding(lock_timeout_s=self._lock_timeout_s) as unit:
            row = unit.get(saga_id, seq, lock=True)
            if row is None:
                self._materialise(unit, saga_id, seq)
                row = unit.get(saga_id, seq, lock=True)
                assert row is not None
            self._authorise(principal, row)
            try:
                result = self._traced(kind, row, act)
            except ApprovalExpiredError as exc:
                failure, result = exc, exc.result
            except SagacityError as exc:
                failure = exc
            finally:
                # Whatever the core journaled (a decision, a refusal, an expiry) is folded in
                # before the lock is released, so the next decider sees the table current.
                self._sync(unit, saga_id)
            updated = unit.get(saga_id, seq)
            assert updated is not None
        if failure is not None:
            raise failure
        return Decided(request=updated, result=result)
