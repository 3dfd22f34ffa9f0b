"""The approval gate's decisions: approve, reject, resume, expire.

State is read from the saga's chain every time (the ``AWAITING_APPROVAL`` entry is the
request, decisions refer to it by ``ref_seq``), never from a side table, so what gates
execution is covered by the same tamper evidence as everything else.  Every check fails
closed.  Decisions on one request are serialised within the process; a second concurrent
decision on the same request is refused rather than interleaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from sagacity import _attributes as attr
from sagacity import _tracing
from sagacity._codec import decode_payload, decode_result
from sagacity._decision_signature import DECISION_EVENTS
from sagacity._events import EntryDraft, EventType, JournalEntry, UnknownEventType
from sagacity._invoke import call_async, call_blocking
from sagacity._oversize import append_bounded, append_bounded_async
from sagacity._redaction import (
    REDACTION_ATTRIBUTE,
    is_canonical_payload,
    redact,
    stored_salts,
)
from sagacity._registry import RegisteredTool
from sagacity._requests import (
    FirstSeen,
    RequestState,
    approval_refusal,
    deadline_us,
    interrupted_resume,
    pending_requests,
    request_state,
)
from sagacity._result import SagaResult, SagaStatus
from sagacity._settlement import PHASE_CALL
from sagacity._tool import (
    check_constraint,
    executed_draft,
    failed_draft,
    intent_draft,
    redacted_payload,
)
from sagacity.chain import payload_sha256, verify
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFound,
    ChainIntegrityError,
    ConfigurationError,
    ConstraintViolation,
    DeclarationError,
    InvalidArgumentError,
    PayloadMismatchError,
    RequestChangedError,
    SerializationError,
    StepInDoubtError,
    TailMovedError,
    UnderDeclaredRequestError,
    UnknownSagaError,
    UnverifiableApprovalError,
)
from sagacity.journal import ApprovalRequest, ConditionalJournal, Journal

if TYPE_CHECKING:
    from sagacity._saga import Sagacity

NO_APPROVAL = "no human approval recorded"
NO_PINNED_KEY = (
    "no approvals public key is pinned (SAGACITY_APPROVALS_PUBLIC_KEY) and the journal is "
    "shared: approvals on it cannot be verified"
)
PAYLOAD_CHANGED = "payload changed since approval"
IN_DOUBT = (
    "INTENT without an outcome (its resume was interrupted): an effect may exist; needs a person"
)


@dataclass(frozen=True, kw_only=True)
class _Bound:
    """A live payload as a resume compares and journals it (docs/adr/0019-erasure.md §5).

    Attributes:
        checked: the payload redacted with the salts the request holds (the live payload
            itself when the request redacted nothing): what is compared with the approved
            payload and, when it matches, journaled on the ``INTENT``; ``None`` when it cannot
            be redacted (not a JSON object).
        checked_redaction: the ``redaction`` attribute of ``checked``.
        text: what a refusal journals: ``checked`` with, besides, every field the tool
            redacts now (fresh salts), so a value the request did not have is not journaled
            in clear either; ``None``: nothing of the payload is journaled.
        redaction: the ``redaction`` attribute of ``text``.
        comparable: a redacted live payload is in the journal's compact JSON form, as a call
            journals it (the same values in other bytes are another payload).
    """

    checked: str | None
    checked_redaction: str | None = None
    text: str | None
    redaction: str | None = None
    comparable: bool = True

    @property
    def sha256(self) -> str | None:
        """SHA-256 of ``text`` (``None`` without one)."""
        return None if self.text is None else payload_sha256(self.text)

    def attributes(self) -> dict[str, str]:
        """The attributes a refusal journaling ``text`` carries beside it."""
        return {} if self.redaction is None else {attr.REDACTION: self.redaction}

    def matches(self, approved_sha256: str | None) -> bool:
        """The live payload is the approved one."""
        return (
            self.comparable
            and self.checked is not None
            and payload_sha256(self.checked) == approved_sha256
        )


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


def _traced(tool: RegisteredTool) -> tuple[str, str]:
    return tool.name, tool.definition.reversibility.value


def _check_seq(seq: object) -> int:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise InvalidArgumentError(f"seq must be an int >= 1, got {seq!r}")
    return seq


def _check_approver(approver: object) -> str:
    if not isinstance(approver, str) or not approver.strip():
        raise InvalidArgumentError(f"approver must be a non-empty str, got {approver!r}")
    return approver


class ApprovalDesk:
    """Gate decisions for one :class:`~sagacity.Sagacity`."""

    def __init__(self, sagacity: Sagacity) -> None:
        self._s = sagacity
        self._claims: set[tuple[str, int]] = set()
        self._claims_lock = threading.Lock()
        self._first_seen = FirstSeen(sagacity.now_us)

    # -- helpers --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _claim(self, saga_id: str, seq: int) -> Iterator[None]:
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

    def _load(self, saga_id: object, seq: object) -> tuple[Sequence[JournalEntry], RequestState]:
        position = _check_seq(seq)
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
        _entries, state = self._load(saga_id, seq)
        with self._claim(state.request.saga_id, state.request.seq):
            entries, state = self._load(saga_id, seq)
            if not state.pending:
                raise AlreadyDecidedError(
                    f"cannot {verb}: {state.describe_closure()}", saga_id=saga_id, seq=seq
                )
            yield entries, state.request

    def _bind(
        self, entries: Sequence[JournalEntry], request: ApprovalRequest, payload: str
    ) -> _Bound:
        """``payload`` (the live one) redacted as the request was, and as a refusal journals
        it (docs/adr/0019-erasure.md §5).

        A request journaled in chain form 1 redacted nothing, and its saga cannot hold
        redaction salts: a refusal of it journals no payload when the tool redacts fields now.

        Raises:
            UnverifiableApprovalError: the request's salts are sealed and this journal cannot
                open them, or unusable (nothing journaled; the request stays pending).
        """
        entry = next((e for e in entries if e.seq == request.seq), None)
        attribute = entry.attributes.get(REDACTION_ATTRIBUTE) if entry is not None else None
        if attribute is None and entry is not None and REDACTION_ATTRIBUTE in entry.commitments:
            raise UnverifiableApprovalError(
                "the approval request's redaction salts are sealed and cannot be opened here: "
                "the live payload cannot be checked (the key service, "
                "SAGACITY_KEY_ENCRYPTION_KEY_FILE, opens them); the request stays pending",
                saga_id=request.saga_id,
                seq=request.seq,
            )
        try:
            salts = stored_salts(attribute)
        except SerializationError as exc:
            raise UnverifiableApprovalError(
                f"the approval request's redaction attribute is unusable: {exc}",
                saga_id=request.saga_id,
                seq=request.seq,
            ) from exc
        tool = self._s.registry.get(request.tool)
        now = [p for p in tool.definition.redact if p not in salts] if tool is not None else []
        if not salts and not now:
            return _Bound(checked=payload, text=payload)
        # Redacting re-encodes the payload: only then must its bytes be the compact form.
        comparable = is_canonical_payload(payload) if salts else True
        try:
            checked = redact(request.tool, payload, list(salts), salts)
            shown = redact(request.tool, payload, [*salts, *now], salts)
        except SerializationError:
            return _Bound(checked=None, text=None, comparable=False)
        if shown.attribute is not None and (entry is None or entry.form == 1):
            # The saga is written in form 1, which cannot seal salts: journal no payload.
            return _Bound(
                checked=checked.payload,
                checked_redaction=checked.attribute,
                text=None,
                comparable=comparable,
            )
        return _Bound(
            checked=checked.payload,
            checked_redaction=checked.attribute,
            text=shown.payload,
            redaction=shown.attribute,
            comparable=comparable,
        )

    def _append_decision(self, draft: EntryDraft, tail: int) -> JournalEntry:
        """Append the entry that decides a request, only onto the chain the decision read.

        With a journal that supports conditional appends, a decision taken by another process
        since the chain was read makes this one fail with :class:`TailMovedError` (and the
        operation is re-checked from the new chain), so concurrent deciders cannot both win.
        """
        journal = self._s.journal
        if isinstance(journal, ConditionalJournal):
            return journal.append_after(draft, after_seq=tail, durable=True)
        return journal.append(draft, durable=True)

    def _decision(
        self, request: ApprovalRequest, event: EventType, actor: str | None, **fields: Any
    ) -> EntryDraft:
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

    def settlement_counts(self, entry: JournalEntry) -> bool:
        """Whether a ``SUSPECT_SETTLED`` may be acted on under this Sagacity's trust: verified
        with a pinned key, always in local mode, never when decisions cannot be verified."""
        trust = self._s.approval_trust
        if trust == "local":
            return True
        verifier = self._s.decision_verifier
        return (
            verifier is not None and verifier.bound(entry, journal=self._s.journal_identity) is None
        )

    def signers(self, entries: Sequence[JournalEntry], request: ApprovalRequest) -> set[str]:
        """The approvers of ``request`` whose ``APPROVED`` counts under this Sagacity's trust.

        With a pinned key only verified approvals count; in local mode every journaled one;
        with neither, none.
        """
        verifier = self._s.decision_verifier
        trust = self._s.approval_trust
        if trust == "unverifiable":
            return set()
        journal = self._s.journal_identity

        def counts(approval: JournalEntry) -> bool:
            return (
                verifier is None
                or approval_refusal(verifier, approval, request, journal=journal) is None
            )

        return {e.actor for e in _approvals(entries, request) if e.actor and counts(e)}

    def requirement(self, request: ApprovalRequest) -> tuple[int, str | None]:
        """The signatures ``request`` needs by this Sagacity's own declaration of its tool, and
        why it is refused when it claims fewer (``None``: it does not).

        What a requester journaled may raise the bar, never lower it: a request claiming fewer
        signatures than the tool's declared reversibility requires is refused.  A tool this
        Sagacity does not know is judged by the request's own claim (a resume refuses it
        anyway: it cannot call it).
        """
        claimed = request.signatures_required
        tool = self._s.registry.get(request.tool)
        if tool is None:
            return claimed, None
        declared = tool.definition.reversibility
        needed = declared.signatures_required
        if claimed < needed:
            return needed, (
                f"the request claims {claimed} signature(s) but tool {request.tool!r} is "
                f"declared {declared.value} here, which needs {needed}"
            )
        return max(claimed, needed), None

    def deadline_us(self, request: ApprovalRequest, *, seen_at_us: int | None = None) -> int | None:
        """When ``request`` lapses for this Sagacity (``None``: never).

        The earlier of the request's own ``expires_at_us`` and, when this Sagacity has an
        approval TTL, that TTL after the earlier of ``requested_at_us`` and when the request
        was first seen (:func:`sagacity._requests.deadline_us`): a deciding service's policy
        bounds requests made without a limit, never extends one made with a shorter limit,
        and runs on this process's clock, not the requester's.  ``seen_at_us``: when the
        caller's store first folded it (the approvals service's table); without it, when
        this process first read it (:class:`sagacity._requests.FirstSeen`), so a request
        dated in the future is bounded by now as it is first read, not by its own date.
        """
        ttl = self._s.approval_ttl_us
        if ttl is not None and seen_at_us is None:
            seen_at_us = self._first_seen(request)
        return deadline_us(
            request.requested_at_us,
            seen_at_us=seen_at_us,
            expires_at_us=request.expires_at_us,
            ttl_us=ttl,
        )

    def _expired(self, request: ApprovalRequest, *, seen_at_us: int | None = None) -> bool:
        deadline = self.deadline_us(request, seen_at_us=seen_at_us)
        return deadline is not None and self._s.now_us() > deadline

    def _close_and_compensate(
        self,
        request: ApprovalRequest,
        draft: EntryDraft,
        *,
        tail: int,
        cause: EventType,
        error: str,
        clean: SagaStatus,
    ) -> SagaResult:
        self._append_decision(draft, tail)
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

    def _expire(self, request: ApprovalRequest, tail: int) -> ApprovalExpiredError:
        message = f"approval request {request.saga_id}/{request.seq} expired"
        result = self._close_and_compensate(
            request,
            self._decision(request, EventType.EXPIRED, None, error=message),
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
        return _retrying(lambda: self._approve(saga_id, seq, approver, request_hash))

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
        self._append_decision(
            self._decision(
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
            if self._expired(request):
                raise self._expire(request, tail)
            needed, refusal = self.requirement(request)
            if refusal is not None:
                self._refuse_approval(request, person, tail, refusal, shown)
                raise UnderDeclaredRequestError(refusal, saga_id=saga_id, seq=seq)
            signers = self.signers(entries, request)
            if person in signers:
                raise AlreadyDecidedError(already_signed(person), saga_id=saga_id, seq=seq)
            if len(signers) >= needed:
                raise AlreadyDecidedError(
                    f"the request already has the {needed} signature(s) it needs",
                    saga_id=saga_id,
                    seq=seq,
                )
            self._append_decision(self._decision(request, EventType.APPROVED, person), tail)
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
        return _retrying(lambda: self._reject(saga_id, seq, approver, reason=reason))

    def _reject(
        self, saga_id: str, seq: int, approver: str, *, reason: str | None = None
    ) -> SagaResult:
        person = _check_approver(approver)
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgumentError(f"reason must be a str, got {reason!r}")
        with self._pending(saga_id, seq, "reject") as (entries, request):
            message = f"rejected by {person}" + (f": {reason}" if reason else "")
            return self._close_and_compensate(
                request,
                self._decision(request, EventType.REJECTED, person, error=reason),
                tail=entries[-1].seq,
                cause=EventType.REJECTED,
                error=message,
                clean=SagaStatus.REJECTED,
            )

    def _checked_for_resume(
        self, saga_id: str, seq: int, payload: object, requested_by: str | None
    ) -> tuple[ApprovalRequest, RegisteredTool, dict[str, Any], int, _Bound]:
        """Every resume check, in order; refusals that end the saga journal and compensate.

        Returns the request, its tool, the decoded arguments, the seq of the chain's tail
        the checks read and the payload as journaled (redacted, where its tool redacts).
        """
        entries, state = self._load(saga_id, seq)
        tail = entries[-1].seq
        request = state.request
        if not state.pending:
            raise ApprovalNotFound(
                f"no pending approval request at {saga_id}/{seq}: {state.describe_closure()}",
                saga_id=saga_id,
                seq=seq,
            )
        unknown = next(
            (
                e
                for e in entries
                if e.seq > request.seq and isinstance(e.event_type, UnknownEventType)
            ),
            None,
        )
        if unknown is not None:
            # A newer release may have closed or changed the request with it: do not run the
            # tool on a state this release cannot read.  Nothing is journaled.
            raise UnverifiableApprovalError(
                f"seq {unknown.seq} after the request has event type {unknown.event_type.value}, "
                "unknown to this release: it may have changed the request; resume with a "
                "release that knows it (the request stays pending)",
                saga_id=saga_id,
                seq=seq,
            )
        if self._expired(request):
            raise self._expire(request, tail)
        tool = self._s.registry.get(request.tool)
        if tool is None:
            raise DeclarationError(
                f"tool {request.tool!r} is not registered with this Sagacity; wrap it before "
                "resuming (the request stays pending)",
                saga_id=saga_id,
                seq=seq,
            )
        assert isinstance(payload, str)
        bound = self._bind(entries, request, payload)
        needed, refusal = self.requirement(request)
        if refusal is not None:
            self._refuse(request, bound, refusal, UnderDeclaredRequestError, tail, requested_by)
        signers = self._authentic_signers(entries, request, bound, tail, requested_by)
        if len(signers) < needed:
            raise ApprovalMissingError(
                f"only {len(signers)} of {needed} required signatures recorded",
                saga_id=saga_id,
                seq=seq,
            )
        stored = request.payload_sha256
        if stored is None or stored != payload_sha256(request.payload):
            message = "the approval request records no payload hash matching what was approved"
            self._refuse(request, bound, message, UnverifiableApprovalError, tail, requested_by)
        if not bound.matches(stored):
            self._refuse(request, bound, PAYLOAD_CHANGED, PayloadMismatchError, tail, requested_by)
        try:
            arguments = decode_payload(payload)
        except SerializationError as exc:
            self._refuse(
                request,
                bound,
                f"approved payload is not replayable: {exc}",
                UnverifiableApprovalError,
                tail,
                requested_by,
            )
        refusal = check_constraint(tool.definition, arguments)
        if refusal is not None:
            result = self._close_and_compensate(
                request,
                self._decision(
                    request,
                    EventType.CONSTRAINT_VIOLATED,
                    None,
                    payload=bound.checked,
                    error=refusal,
                    attributes={
                        **_requested_by(requested_by),
                        **_redaction(bound.checked_redaction),
                    },
                ),
                tail=tail,
                cause=EventType.CONSTRAINT_VIOLATED,
                error=refusal,
                clean=SagaStatus.COMPENSATED,
            )
            raise ConstraintViolation(refusal, saga_id=saga_id, seq=seq, result=result)
        return request, tool, arguments, tail, bound

    def _authentic_signers(
        self,
        entries: Sequence[JournalEntry],
        request: ApprovalRequest,
        bound: _Bound,
        tail: int,
        requested_by: str | None,
    ) -> set[str]:
        """The approvers whose approval counts; refuses when none was journaled, when none
        can be verified, and (journaled, compensated) when one does not verify."""
        saga_id, seq = request.saga_id, request.seq
        approvals = [e for e in _approvals(entries, request) if e.actor]
        if not approvals:
            raise ApprovalMissingError(NO_APPROVAL, saga_id=saga_id, seq=seq)
        trust = self._s.approval_trust
        if trust == "unverifiable":
            # A configuration gap, not an attack: the request stays pending until a key is
            # pinned.
            raise ApprovalMissingError(NO_APPROVAL, saga_id=saga_id, seq=seq, detail=NO_PINNED_KEY)
        verifier = self._s.decision_verifier
        if verifier is not None:
            for approval in approvals:
                reason = approval_refusal(
                    verifier, approval, request, journal=self._s.journal_identity
                )
                if reason is not None:
                    self._refuse(
                        request,
                        bound,
                        NO_APPROVAL,
                        ApprovalMissingError,
                        tail,
                        requested_by,
                        detail=f"the APPROVED at seq {approval.seq} does not verify ({reason})",
                    )
        return {e.actor for e in approvals if e.actor}

    def _refuse(
        self,
        request: ApprovalRequest,
        bound: _Bound,
        message: str,
        error: type[ApprovalError],
        tail: int,
        requested_by: str | None,
        *,
        detail: str | None = None,
    ) -> NoReturn:
        journaled = message if detail is None else f"{message}: {detail}"
        shown = {} if bound.sha256 is None else {attr.PAYLOAD_SHA256: bound.sha256}
        draft = self._decision(
            request,
            EventType.RESUME_REFUSED,
            None,
            payload=bound.text,
            error=journaled,
            attributes={**shown, **_requested_by(requested_by), **bound.attributes()},
        )
        result = self._close_and_compensate(
            request,
            draft,
            tail=tail,
            cause=EventType.RESUME_REFUSED,
            error=journaled,
            clean=SagaStatus.COMPENSATED,
        )
        exc = error(message, saga_id=request.saga_id, seq=request.seq, result=result)
        exc.detail = detail
        raise exc

    def _outcome(self, draft: EntryDraft, hidden: frozenset[str]) -> None:
        """Journal the resumed call's outcome, the call's redacted values masked."""
        append_bounded(self._s.journal, draft, durable=True, redacted=hidden)

    def _after_resume(
        self,
        request: ApprovalRequest,
        value: Any,
        exc: Exception | None,
        hidden: frozenset[str] = frozenset(),
    ) -> SagaResult:
        s = self._s
        if exc is not None:
            return self._end_failed(request, f"{type(exc).__name__}: {exc}", exc, hidden)
        remaining = pending_requests(s.journal.entries(request.saga_id))
        status = SagaStatus.AWAITING_APPROVAL if remaining else SagaStatus.COMPLETED
        s.journal.append(
            EntryDraft(
                saga_id=request.saga_id,
                event_type=EventType.SAGA_ENDED,
                result=status.value,
                actor=s.writer_id,
                recorded_at_us=s.now_us(),
            )
        )
        s.journal.flush()
        return SagaResult(
            status=status,
            saga_id=request.saga_id,
            value=value,
            awaiting_tool_name=remaining[0].tool if remaining else None,
            awaiting_seq=remaining[0].seq if remaining else None,
        )

    def _end_failed(
        self,
        request: ApprovalRequest,
        error: str,
        exc: Exception | None,
        hidden: frozenset[str] = frozenset(),
    ) -> SagaResult:
        """End the saga after the resumed call failed: compensate it (or hand it over);
        ``hidden``: the texts of the call's redacted values, masked in what is journaled."""
        s = self._s
        return s.end_saga(
            request.saga_id,
            cause=EventType.FAILED,
            ref_seq=request.seq,
            error=error,
            clean_status=SagaStatus.COMPENSATED,
            report=None if s.compensation_mode == "delegated" else s._runner().run(request.saga_id),
            exception=exc,
            redacted=hidden,
        )

    def _finish_interrupted(self, saga_id: str, seq: int, payload: str) -> SagaResult | None:
        """Finish a resume of the request that stopped before the saga's end, never calling
        the tool again (``None`` when no resume of it was interrupted).

        With the call's outcome on the chain, the saga is ended as the resume would have ended
        it.  Without one the call may have taken effect: the step is journaled ``SUSPECT``
        (onto the chain just read, so an outcome journaled meanwhile wins) and the saga
        compensated, or handed to compensation, for a person to settle it.

        Raises:
            PayloadMismatchError: ``payload`` is not the approved one (nothing journaled).
            StepInDoubtError: the call has no outcome (journaled as above).
            TailMovedError: another writer appended since the chain was read.
        """
        entries, state = self._load(saga_id, seq)
        intent = interrupted_resume(entries, state)
        if intent is None:
            return None
        request = state.request
        bound = self._bind(entries, request, payload)
        if bound.checked != intent.payload or not bound.matches(request.payload_sha256):
            raise PayloadMismatchError(
                PAYLOAD_CHANGED,
                saga_id=saga_id,
                seq=seq,
                detail=f"the resume started at seq {intent.seq} ran the approved payload; "
                "nothing was journaled for this attempt",
            )
        outcome = next(
            (
                e
                for e in entries
                if e.seq > intent.seq
                and e.ref_seq == intent.seq
                and e.event_type in (EventType.EXECUTED, EventType.FAILED)
            ),
            None,
        )
        if outcome is not None and outcome.event_type is EventType.EXECUTED:
            value = decode_result(outcome.result, outcome.attributes.get(attr.RESULT_ENCODING))
            return self._after_resume(request, value, None)
        if outcome is not None:
            return self._end_failed(request, outcome.error or "the approved call failed", None)
        s = self._s
        suspect = EntryDraft(
            saga_id=request.saga_id,
            event_type=EventType.SUSPECT,
            tool=intent.tool,
            payload=intent.payload,
            error=IN_DOUBT,
            actor=s.writer_id,
            attributes={
                attr.REF_SEQ: str(intent.seq),
                attr.PHASE: PHASE_CALL,
                **{k: v for k, v in intent.attributes.items() if k == attr.REDACTION},
            },
            recorded_at_us=s.now_us(),
        )
        self._append_decision(suspect, entries[-1].seq)
        message = (
            f"the approved call of {request.tool} is in doubt: an earlier resume journaled its "
            f"INTENT (seq {intent.seq}) and stopped before recording an outcome, so it may have "
            "taken effect and is not run again; the step is SUSPECT for a person to settle "
            "(the saga was handed to compensation)"
        )
        result = s.end_saga(
            request.saga_id,
            cause=EventType.SUSPECT,
            ref_seq=intent.seq,
            error=message,
            clean_status=SagaStatus.COMPENSATED,
            report=None if s.compensation_mode == "delegated" else s._runner().run(request.saga_id),
        )
        raise StepInDoubtError(message, saga_id=saga_id, seq=seq, result=result)

    def _check_and_intend(
        self, saga_id: str, seq: int, payload: str, requested_by: str | None
    ) -> tuple[ApprovalRequest, RegisteredTool, dict[str, Any], JournalEntry]:
        """The resume checks, then the ``INTENT`` appended onto the chain they read."""
        request, tool, arguments, tail, bound = self._checked_for_resume(
            saga_id, seq, payload, requested_by
        )
        s = self._s
        assert bound.checked is not None  # it matched the approved payload
        draft = intent_draft(
            s,
            tool.definition,
            request.saga_id,
            bound.checked,
            request.seq,
            redaction=bound.checked_redaction,
        )
        if requested_by is not None:
            draft = replace(draft, attributes={**draft.attributes, **_requested_by(requested_by)})
        intent = self._append_decision(draft, tail)
        return request, tool, arguments, intent

    def resume(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """See :meth:`Sagacity.resume_saga`."""
        _check_requested_by(requested_by)
        if not isinstance(payload, str):
            raise InvalidArgumentError(
                f"payload must be the approved payload as a str, got {type(payload).__name__}"
            )
        _check_seq(seq)
        with self._claim(str(saga_id), seq):
            finished = _retrying(lambda: self._finish_interrupted(saga_id, seq, payload))
            if finished is not None:
                return finished
            request, tool, arguments, intent = _retrying(
                lambda: self._check_and_intend(saga_id, seq, payload, requested_by)
            )
            s = self._s
            hidden = _redacted_texts(tool, payload)
            call = functools.partial(call_blocking, tool.function, **arguments)
            try:
                value = _tracing.resumed(*_traced(tool), intent, call)
            except Exception as exc:
                self._outcome(failed_draft(s, tool.definition, intent, exc), hidden)
                return self._after_resume(request, None, exc, hidden)
            except BaseException as exc:
                self._outcome(failed_draft(s, tool.definition, intent, exc), hidden)
                raise
            self._outcome(executed_draft(s, tool.definition, intent, value), hidden)
            return self._after_resume(request, value, None, hidden)

    async def resume_async(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """See :meth:`Sagacity.resume_saga_async`."""
        _check_requested_by(requested_by)
        if not isinstance(payload, str):
            raise InvalidArgumentError(
                f"payload must be the approved payload as a str, got {type(payload).__name__}"
            )
        _check_seq(seq)
        with self._claim(str(saga_id), seq):
            # The checks read and verify the chain (and may compensate a refused resume): off
            # the event loop.
            finished = await asyncio.to_thread(
                _retrying, lambda: self._finish_interrupted(saga_id, seq, payload)
            )
            if finished is not None:
                return finished
            request, tool, arguments, intent = await asyncio.to_thread(
                _retrying, lambda: self._check_and_intend(saga_id, seq, payload, requested_by)
            )
            s = self._s
            journal = s.journal
            hidden = _redacted_texts(tool, payload)
            calling = functools.partial(call_async, tool.function, **arguments)
            try:
                value = await _tracing.resumed_async(*_traced(tool), intent, calling)
            except Exception as exc:
                failed = failed_draft(s, tool.definition, intent, exc)
                await append_bounded_async(journal, failed, durable=True, redacted=hidden)
                return await asyncio.to_thread(self._after_resume, request, None, exc, hidden)
            except BaseException as exc:
                failed = failed_draft(s, tool.definition, intent, exc)
                await append_bounded_async(journal, failed, durable=True, redacted=hidden)
                raise
            executed = executed_draft(s, tool.definition, intent, value)
            await append_bounded_async(journal, executed, durable=True, redacted=hidden)
            return await asyncio.to_thread(self._after_resume, request, value, None, hidden)

    def expire(self, saga_id: str, seq: int, *, seen_at_us: int | None = None) -> SagaResult:
        """See :meth:`Sagacity.expire`."""
        return _retrying(lambda: self._expire_one(saga_id, seq, seen_at_us))

    def _expire_one(self, saga_id: str, seq: int, seen_at_us: int | None) -> SagaResult:
        with self._pending(saga_id, seq, "expire") as (entries, request):
            if not self._expired(request, seen_at_us=seen_at_us):
                raise InvalidArgumentError(
                    f"approval request {saga_id}/{seq} has not reached its time to live",
                    saga_id=saga_id,
                    seq=seq,
                )
            error = self._expire(request, entries[-1].seq)
            assert error.result is not None
            return error.result

    def expire_overdue(self) -> list[SagaResult]:
        """See :meth:`Sagacity.expire_overdue`."""
        results: list[SagaResult] = []
        for request in self._s.journal.pending_approvals():
            if not self._expired(request):
                continue
            try:
                with self._claim(request.saga_id, request.seq):
                    entries, state = self._load(request.saga_id, request.seq)
                    if state.pending and self._expired(state.request):
                        error = self._expire(state.request, entries[-1].seq)
                        if error.result is not None:
                            results.append(error.result)
            except (AlreadyDecidedError, TailMovedError):
                continue  # decided meanwhile, here or by another process
        return results


_ATTEMPTS = 5
T = TypeVar("T")


def _retrying(operation: Callable[[], T]) -> T:
    """Run a decision, re-checking it from the new chain when another writer moved the tail."""
    for attempt in range(_ATTEMPTS):
        try:
            return operation()
        except TailMovedError:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _approvals(entries: Sequence[JournalEntry], request: ApprovalRequest) -> list[JournalEntry]:
    """The ``APPROVED`` entries of ``request`` (a pending one: none is past its closure)."""
    ref = str(request.seq)
    return [
        e
        for e in entries
        if e.seq > request.seq
        and e.event_type is EventType.APPROVED
        and e.attributes.get(attr.REF_SEQ) == ref
    ]


def _redacted_texts(tool: RegisteredTool, payload: str) -> frozenset[str]:
    """The texts of the values ``tool`` redacts in the live ``payload`` of a resume (the call
    runs with them in clear): masked in its outcome and the saga's end.  The payload was
    checked against the request, so it redacts; the fresh salts drawn here are not used."""
    try:
        return redacted_payload(tool.definition, payload).values
    except SerializationError:
        return frozenset()


def _redaction(redaction: str | None) -> dict[str, str]:
    return {} if redaction is None else {attr.REDACTION: redaction}


def _requested_by(requested_by: str | None) -> dict[str, str]:
    return {} if requested_by is None else {attr.REQUESTED_BY: requested_by}


def _check_requested_by(requested_by: object) -> None:
    if requested_by is not None and (not isinstance(requested_by, str) or not requested_by.strip()):
        raise InvalidArgumentError(f"requested_by must be a non-empty str, got {requested_by!r}")
