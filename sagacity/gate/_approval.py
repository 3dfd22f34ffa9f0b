"""The approval gate's decisions: approve, reject, expire.

State is read from the saga's chain every time (the ``AWAITING_APPROVAL`` entry is the
request, decisions refer to it by ``ref_seq``), never from a side table, so what gates
execution is covered by the same tamper evidence as everything else.  Every check fails
closed.  Decisions on one request are serialised within the process; a second concurrent
decision on the same request is refused rather than interleaved.

What an approval proves (whose signatures count, how many are needed, whether a live payload
is the approved one) is :mod:`sagacity.gate._approval_verify`'s; running the approved call is
:mod:`sagacity.gate._resume`'s, on this desk's claims and decision appends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sagacity.chain import verify
from sagacity.entries import _attributes as attr
from sagacity.entries._bounds import INT64_MAX
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    ApprovalNotFound,
    ChainIntegrityError,
    ConfigurationError,
    InvalidArgumentError,
    PermissionDeniedError,
    RequestChangedError,
    TailMovedError,
    UnderDeclaredRequestError,
    UnknownSagaError,
)
from sagacity.gate import _approval_verify as trust
from sagacity.gate._approver_groups import counts_toward
from sagacity.gate._deadline_extension import extended_us
from sagacity.gate._requests import FirstSeen, RequestState, deadline_us, request_state
from sagacity.journal import ApprovalRequest, ConditionalJournal, Journal
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.signing._decision_signature import DECISION_EVENTS

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity


def already_signed(approver: str) -> str:
    """The refusal of a second signature by the same person."""
    return f"{approver} already signed this request"


def load_chain(journal: Journal, saga_id: object) -> Sequence[JournalEntry]:
    """The saga's verified chain.

    Raises:
        InvalidArgumentError: ``saga_id`` is not a non-empty str.
        UnknownSagaError: the saga has no entries.
        ChainIntegrityError: the chain does not verify (decisions on it are refused).
    """
    if not isinstance(saga_id, str) or not saga_id:
        raise InvalidArgumentError(f"saga_id must be a non-empty str, got {saga_id!r}")
    entries = journal.entries(saga_id)
    if not entries:
        raise UnknownSagaError(f"unknown saga {saga_id!r}", saga_id=saga_id)
    verdict = verify(entries, saga_id=saga_id)
    if not verdict.ok:
        raise ChainIntegrityError(
            f"the chain of saga {saga_id!r} does not verify at seq {verdict.bad_seq} "
            f"({verdict.reason}: {verdict.detail}); refusing to decide on it",
            saga_id=saga_id,
            seq=verdict.bad_seq,
        )
    return entries


def check_seq(seq: object) -> int:
    """``seq`` if it is a request's seq (an int >= 1).

    Raises:
        InvalidArgumentError: otherwise.
    """
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise InvalidArgumentError(f"seq must be an int >= 1, got {seq!r}")
    return seq


def _check_approver(approver: object) -> str:
    if not isinstance(approver, str) or not approver.strip():
        raise InvalidArgumentError(f"approver must be a non-empty str, got {approver!r}")
    return approver


_ATTEMPTS = 5
T = TypeVar("T")


def retrying(operation: Callable[[], T]) -> T:
    """Run a decision, re-checking it from the new chain when another writer moved the tail."""
    for attempt in range(_ATTEMPTS):
        try:
            return operation()
        except TailMovedError:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class ApprovalDesk:
    """Gate decisions for one :class:`~sagacity.Sagacity`."""

    def __init__(self, sagacity: Sagacity) -> None:
        self._s = sagacity
        self._claims: set[tuple[str, int]] = set()
        self._claims_lock = threading.Lock()
        self._first_seen = FirstSeen(sagacity.now_us)

    # -- what every decision shares (the resume's too) ------------------------------------
    @contextlib.contextmanager
    def claim(self, saga_id: str, seq: int) -> Iterator[None]:
        """Hold the request at ``saga_id``/``seq`` for one decision in this process.

        Raises:
            AlreadyDecidedError: another decision on it is in progress.
        """
        key = (saga_id, seq)
        with self._claims_lock:
            if key in self._claims:
                raise AlreadyDecidedError(
                    f"another decision on request {saga_id}/{seq} is in progress; retry",
                    saga_id=saga_id,
                    seq=seq,
                )
            self._claims.add(key)
        try:
            yield
        finally:
            with self._claims_lock:
                self._claims.discard(key)

    def load(self, saga_id: object, seq: object) -> tuple[Sequence[JournalEntry], RequestState]:
        """The saga's verified chain and the state of its request at ``seq``.

        Raises:
            ApprovalNotFound: no request at ``seq`` (and :func:`load_chain`'s errors).
        """
        position = check_seq(seq)
        entries = load_chain(self._s.journal, saga_id)
        assert isinstance(saga_id, str)
        state = request_state(entries, position)
        if state is None:
            raise ApprovalNotFound(
                f"saga {saga_id!r} has no approval request at seq {position}",
                saga_id=saga_id,
                seq=position,
            )
        return entries, state

    @contextlib.contextmanager
    def _pending(
        self, saga_id: str, seq: int, verb: str
    ) -> Iterator[tuple[Sequence[JournalEntry], ApprovalRequest]]:
        """Claim the request at ``saga_id``/``seq``; yield its chain and it, read under the claim.

        Raises:
            AlreadyDecidedError: another decision on it is in progress, or it is no longer
                pending ("cannot <verb>: ...").
        """
        _entries, state = self.load(saga_id, seq)
        with self.claim(state.request.saga_id, state.request.seq):
            entries, state = self.load(saga_id, seq)
            if not state.pending:
                raise AlreadyDecidedError(
                    f"cannot {verb}: {state.describe_closure()}", saga_id=saga_id, seq=seq
                )
            yield entries, state.request

    def append_decision(self, draft: EntryDraft, tail: int) -> JournalEntry:
        """Append the entry that decides a request, only onto the chain the decision read.

        With a journal that supports conditional appends, a decision taken by another process
        since the chain was read makes this one fail with :class:`TailMovedError` (and the
        operation is re-checked from the new chain), so concurrent deciders cannot both win.
        """
        journal = self._s.journal
        if isinstance(journal, ConditionalJournal):
            return journal.append_after(draft, after_seq=tail, durable=True)
        return journal.append(draft, durable=True)

    def decision(
        self, request: ApprovalRequest, event: EventType, actor: str | None, **fields: Any
    ) -> EntryDraft:
        """The entry deciding ``request`` (or refusing a step of it): naming the request's seq
        and the policy in force and, for a decision, what it decided on (the payload's hash,
        the request entry's hash, the journal), signed where this Sagacity signs decisions."""
        attributes = {
            attr.REF_SEQ: str(request.seq),
            attr.POLICY_VERSION: self._s.policy_version,
            **fields.pop("attributes", {}),
        }
        signer = self._s.decision_signer
        decision = event.value in DECISION_EVENTS
        if decision and request.payload_sha256 is not None:
            # Every decision names what it decided on (the signature covers it).
            attributes.setdefault(attr.PAYLOAD_SHA256, request.payload_sha256)
        if decision:
            # ... the request entry itself, and the journal it was decided on.
            if request.entry_hash is not None:
                attributes.setdefault(attr.REQUEST_HASH, request.entry_hash)
            attributes.setdefault(attr.JOURNAL, self._s.journal_identity)
        draft = EntryDraft(
            saga_id=request.saga_id,
            event_type=event,
            tool=request.tool,
            actor=actor if actor is not None else self._s.writer_id,
            attributes=attributes,
            recorded_at_us=self._s.now_us(),
            **fields,
        )
        return signer.sign(draft) if decision and signer is not None else draft

    def close_and_compensate(
        self,
        request: ApprovalRequest,
        draft: EntryDraft,
        *,
        tail: int,
        cause: EventType,
        error: str,
        clean: SagaStatus,
    ) -> SagaResult:
        """Append ``draft`` (closing ``request``) onto the chain read, then compensate the
        saga (or hand it to compensation, when delegated) and end it."""
        self.append_decision(draft, tail)
        report = (
            None
            if self._s.compensation_mode == "delegated"
            else self._s._runner().run(request.saga_id)
        )
        return self._s.end_saga(
            request.saga_id,
            cause=cause,
            ref_seq=request.seq,
            error=error,
            clean_status=clean,
            report=report,
        )

    # -- what an approval proves (sagacity.gate._approval_verify) ------------------------------
    def settlement_counts(self, entry: JournalEntry) -> bool:
        """See :meth:`Sagacity.settlement_counts`."""
        return trust.settlement_counts(self._s, entry)

    def signers(self, entries: Sequence[JournalEntry], request: ApprovalRequest) -> set[str]:
        """See :meth:`Sagacity.counted_signers`."""
        return trust.counted_signers(self._s, entries, request)

    def requirement(self, request: ApprovalRequest) -> tuple[int, str | None]:
        """See :func:`sagacity.gate._approval_verify.requirement`."""
        return trust.requirement(self._s, request)

    # -- time to live ---------------------------------------------------------------------
    def deadline_us(
        self,
        request: ApprovalRequest,
        *,
        seen_at_us: int | None = None,
        entries: Sequence[JournalEntry] | None = None,
    ) -> int | None:
        """When ``request`` lapses for this Sagacity (``None``: never).

        The earlier of the request's own ``expires_at_us`` and, when this Sagacity has an
        approval TTL, that TTL after the earlier of ``requested_at_us`` and when the request
        was first seen (:func:`sagacity.gate._requests.deadline_us`): a deciding service's policy
        bounds requests made without a limit, never extends one made with a shorter limit,
        and runs on this process's clock, not the requester's.  ``seen_at_us``: when the
        caller's store first folded it (the approvals service's table); without it, when
        this process first read it (:class:`sagacity.gate._requests.FirstSeen`), so a request
        dated in the future is bounded by now as it is first read, not by its own date.
        Given the saga's ``entries``, the deadline extensions on them that a pinned operator
        key signed are added (:mod:`sagacity.gate._deadline_extension`).
        """
        ttl = self._s.approval_ttl_us
        if ttl is not None and seen_at_us is None:
            seen_at_us = self._first_seen(request)
        deadline = deadline_us(
            request.requested_at_us,
            seen_at_us=seen_at_us,
            expires_at_us=request.expires_at_us,
            ttl_us=ttl,
        )
        if deadline is None or entries is None:
            return deadline
        extra = extended_us(
            entries, request, self._s.operator_verifier, journal=self._s.journal_identity
        )
        return min(deadline + extra, INT64_MAX)

    def expired(
        self,
        request: ApprovalRequest,
        *,
        seen_at_us: int | None = None,
        entries: Sequence[JournalEntry] | None = None,
    ) -> bool:
        """Whether ``request`` is past its deadline on this Sagacity's clock (with the
        verified extensions on ``entries``, when given)."""
        deadline = self.deadline_us(request, seen_at_us=seen_at_us, entries=entries)
        return deadline is not None and self._s.now_us() > deadline

    def expire_request(self, request: ApprovalRequest, tail: int) -> ApprovalExpiredError:
        """Journal ``EXPIRED`` for ``request`` and compensate; the error carries the result."""
        message = f"approval request {request.saga_id}/{request.seq} expired"
        result = self.close_and_compensate(
            request,
            self.decision(request, EventType.EXPIRED, None, error=message),
            tail=tail,
            cause=EventType.EXPIRED,
            error=message,
            clean=SagaStatus.EXPIRED,
        )
        return ApprovalExpiredError(
            message, saga_id=request.saga_id, seq=request.seq, result=result
        )

    # -- decisions ------------------------------------------------------------------------
    def approve(
        self, saga_id: str, seq: int, approver: str, *, request_hash: str | None = None
    ) -> ApprovalRequest:
        """See :meth:`Sagacity.approve`."""
        if request_hash is not None and not isinstance(request_hash, str):
            raise InvalidArgumentError(f"request_hash must be a str, got {request_hash!r}")
        return retrying(lambda: self._approve(saga_id, seq, approver, request_hash))

    def _refuse_approval(
        self,
        request: ApprovalRequest,
        person: str,
        tail: int,
        reason: str,
        shown: str | None,
    ) -> None:
        """Journal ``APPROVAL_REFUSED`` (the request stays pending): who tried, why, and the
        hash they were shown."""
        attributes = {attr.REQUEST_HASH: shown} if shown is not None else {}
        self.append_decision(
            self.decision(
                request,
                EventType.APPROVAL_REFUSED,
                person,
                error=reason,
                attributes=attributes,
            ),
            tail,
        )

    def _approve(self, saga_id: str, seq: int, approver: str, shown: str | None) -> ApprovalRequest:
        person = _check_approver(approver)
        if self._s.decision_signer is None and self._s.approval_trust != "local":
            # An unsigned approval on a shared journal never counts: say so before journaling.
            raise ConfigurationError(
                "approvals on a shared journal are given by the approvals service "
                "(`sagacity serve approvals`: its console, API or `sagacity approvals approve`), "
                "which signs them; this Sagacity holds no decision key, so an approval it "
                "journaled would never count"
            )
        with self._pending(saga_id, seq, "approve") as (entries, request):
            tail = entries[-1].seq
            if shown is not None and shown != request.entry_hash:
                reason = (
                    f"the request shown (hash {shown[:16]}…) is not the chain's request at seq "
                    f"{request.seq} (hash {(request.entry_hash or '')[:16]}…): reload it and "
                    "decide again"
                )
                self._refuse_approval(request, person, tail, reason, shown)
                raise RequestChangedError(reason, saga_id=saga_id, seq=seq)
            if self.expired(request, entries=entries):
                raise self.expire_request(request, tail)
            needed, refusal = self.requirement(request)
            if refusal is not None:
                self._refuse_approval(request, person, tail, refusal, shown)
                raise UnderDeclaredRequestError(refusal, saga_id=saga_id, seq=seq)
            # A count an earlier approval was signed with stands (a resumer waits for it) even
            # if the route was loosened since: more approvals are taken until it is reached.
            needed = max(needed, trust.signed_need(self._s, entries, request))
            outside = counts_toward(self._s.approver_groups, request.tool, person)
            if outside is not None:
                # It would not count: refused and journaled, never signed.
                self._refuse_approval(request, person, tail, outside, shown)
                raise PermissionDeniedError(outside, saga_id=saga_id, seq=seq)
            signers = self.signers(entries, request)
            if person in signers:
                raise AlreadyDecidedError(already_signed(person), saga_id=saga_id, seq=seq)
            if len(signers) >= needed:
                raise AlreadyDecidedError(
                    f"the request already has the {needed} signature(s) it needs",
                    saga_id=saga_id,
                    seq=seq,
                )
            # The count this desk decided is signed with the approval: a resumer that does not
            # know the tool's route waits for as many.
            counted = {attr.SIGNATURES_REQUIRED: str(needed)}
            self.append_decision(
                self.decision(request, EventType.APPROVED, person, attributes=counted), tail
            )
            self._s.journal.flush()
            return ApprovalRequest(
                saga_id=request.saga_id,
                seq=request.seq,
                tool=request.tool,
                payload=request.payload,
                payload_sha256=request.payload_sha256,
                requested_at_us=request.requested_at_us,
                signatures_required=needed,
                signed_by=(*(s for s in request.signed_by if s in signers), person),
                policy_version=request.policy_version,
                expires_at_us=request.expires_at_us,
                reversibility=request.reversibility,
                entry_hash=request.entry_hash,
            )

    def reject(
        self, saga_id: str, seq: int, approver: str, *, reason: str | None = None
    ) -> SagaResult:
        """See :meth:`Sagacity.reject`."""
        return retrying(lambda: self._reject(saga_id, seq, approver, reason=reason))

    def _reject(
        self, saga_id: str, seq: int, approver: str, *, reason: str | None = None
    ) -> SagaResult:
        person = _check_approver(approver)
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgumentError(f"reason must be a str, got {reason!r}")
        with self._pending(saga_id, seq, "reject") as (entries, request):
            message = f"rejected by {person}" + (f": {reason}" if reason else "")
            return self.close_and_compensate(
                request,
                self.decision(request, EventType.REJECTED, person, error=reason),
                tail=entries[-1].seq,
                cause=EventType.REJECTED,
                error=message,
                clean=SagaStatus.REJECTED,
            )

    def expire(self, saga_id: str, seq: int, *, seen_at_us: int | None = None) -> SagaResult:
        """See :meth:`Sagacity.expire`."""
        return retrying(lambda: self._expire_one(saga_id, seq, seen_at_us))

    def _expire_one(self, saga_id: str, seq: int, seen_at_us: int | None) -> SagaResult:
        with self._pending(saga_id, seq, "expire") as (entries, request):
            if not self.expired(request, seen_at_us=seen_at_us, entries=entries):
                raise InvalidArgumentError(
                    f"approval request {saga_id}/{seq} has not reached its time to live",
                    saga_id=saga_id,
                    seq=seq,
                )
            error = self.expire_request(request, entries[-1].seq)
            assert error.result is not None
            return error.result

    def expire_overdue(self) -> list[SagaResult]:
        """See :meth:`Sagacity.expire_overdue`."""
        results: list[SagaResult] = []
        for request in self._s.journal.pending_approvals():
            if not self.expired(request):
                continue
            try:
                with self.claim(request.saga_id, request.seq):
                    entries, state = self.load(request.saga_id, request.seq)
                    if state.pending and self.expired(state.request, entries=entries):
                        error = self.expire_request(state.request, entries[-1].seq)
                        if error.result is not None:
                            results.append(error.result)
            except (AlreadyDecidedError, TailMovedError):
                continue  # decided meanwhile, here or by another process
        return results
