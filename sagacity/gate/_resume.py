"""Resuming an approved call: the checks, the ``INTENT``, the call, its outcome, the saga's end.

A resume runs the gated tool if and only if its request is pending, approved by enough
people whose approvals count (:mod:`sagacity.gate._approval_verify`), unexpired, allowed by the
tool's constraint, and the live payload is the approved one.  Every check fails closed; a
refusal that ends the saga journals why and compensates.  A resume that stopped between its
``INTENT`` and the saga's end (its process died) is finished, never run again.  The claims,
the decision entries and their compare-and-append are the approval desk's
(:mod:`sagacity.gate._approval`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from sagacity.chain import payload_sha256
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry, UnknownEventType
from sagacity.entries._oversize import append_bounded, append_bounded_async
from sagacity.errors import (
    ApprovalError,
    ApprovalMissingError,
    ApprovalNotFound,
    ConstraintViolation,
    DeclarationError,
    InvalidArgumentError,
    PayloadMismatchError,
    SerializationError,
    StepInDoubtError,
    UnderDeclaredRequestError,
    UnverifiableApprovalError,
)
from sagacity.gate._approval import ApprovalDesk, check_seq, retrying
from sagacity.gate._approval_verify import (
    NO_APPROVAL,
    PAYLOAD_CHANGED,
    Bound,
    authentic_signers,
    bind,
    signed_need,
)
from sagacity.gate._requests import interrupted_resume, pending_requests
from sagacity.gate._settlement import PHASE_CALL
from sagacity.journal import ApprovalRequest
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.telemetry import _tracing
from sagacity.tools._codec import decode_payload, decode_result
from sagacity.tools._invoke import call_async, call_blocking
from sagacity.tools._registry import RegisteredTool
from sagacity.tools._tool import (
    check_constraint,
    executed_draft,
    failed_draft,
    intent_draft,
    redacted_payload,
)

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity

IN_DOUBT = (
    "INTENT without an outcome (its resume was interrupted): an effect may exist; needs a person"
)

_Checked = tuple[ApprovalRequest, RegisteredTool, dict[str, Any], int, Bound]
"""What the checks hand the call: the request, its tool, the decoded arguments, the seq of the
chain's tail they read and the payload as journaled (redacted, where its tool redacts)."""


class Resumer:
    """Resumes approved calls for one :class:`~sagacity.Sagacity`, on its approval desk."""

    def __init__(self, sagacity: Sagacity, desk: ApprovalDesk) -> None:
        self._s = sagacity
        self._desk = desk

    # -- running the call -----------------------------------------------------------------
    def resume(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """See :meth:`Sagacity.resume_saga`."""
        _check_resume(seq, payload, requested_by)
        with self._desk.claim(str(saga_id), seq):
            finished = retrying(lambda: self._finish_interrupted(saga_id, seq, payload))
            if finished is not None:
                return finished
            request, tool, arguments, intent = retrying(
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
        _check_resume(seq, payload, requested_by)
        with self._desk.claim(str(saga_id), seq):
            # The checks read and verify the chain (and may compensate a refused resume): off
            # the event loop.
            finished = await asyncio.to_thread(
                retrying, lambda: self._finish_interrupted(saga_id, seq, payload)
            )
            if finished is not None:
                return finished
            request, tool, arguments, intent = await asyncio.to_thread(
                retrying, lambda: self._check_and_intend(saga_id, seq, payload, requested_by)
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
        intent = self._desk.append_decision(draft, tail)
        return request, tool, arguments, intent

    # -- the checks -----------------------------------------------------------------------
    def _checked_for_resume(
        self, saga_id: str, seq: int, payload: object, requested_by: str | None
    ) -> _Checked:
        """Every resume check, in order; refusals that end the saga journal and compensate."""
        entries, request, tool = self._resumable(saga_id, seq)
        tail = entries[-1].seq
        assert isinstance(payload, str)
        bound = bind(self._s, entries, request, payload)
        needed, refusal = self._desk.requirement(request)
        if refusal is not None:
            self._refuse(request, bound, refusal, UnderDeclaredRequestError, tail, requested_by)
        signers, unverified = authentic_signers(self._s, entries, request)
        if unverified is not None:
            self._refuse(
                request,
                bound,
                NO_APPROVAL,
                ApprovalMissingError,
                tail,
                requested_by,
                detail=unverified,
            )
        needed = max(needed, signed_need(self._s, entries, request))
        if len(signers) < needed:
            raise ApprovalMissingError(
                f"only {len(signers)} of {needed} required signatures recorded",
                saga_id=saga_id,
                seq=seq,
            )
        arguments = self._approved_arguments(request, bound, payload, tail, requested_by)
        self._check_policy(request, tool, arguments, bound, tail, requested_by)
        return request, tool, arguments, tail, bound

    def _resumable(
        self, saga_id: str, seq: int
    ) -> tuple[Sequence[JournalEntry], ApprovalRequest, RegisteredTool]:
        """The request's chain, the request and its tool, if it can be resumed at all:
        pending, nothing after it this release cannot read, not lapsed (else journaled
        ``EXPIRED`` and compensated), its tool registered here."""
        entries, state = self._desk.load(saga_id, seq)
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
        if self._desk.expired(request, entries=entries):
            raise self._desk.expire_request(request, entries[-1].seq)
        tool = self._s.registry.get(request.tool)
        if tool is None:
            raise DeclarationError(
                f"tool {request.tool!r} is not registered with this Sagacity; wrap it before "
                "resuming (the request stays pending)",
                saga_id=saga_id,
                seq=seq,
            )
        return entries, request, tool

    def _approved_arguments(
        self,
        request: ApprovalRequest,
        bound: Bound,
        payload: str,
        tail: int,
        requested_by: str | None,
    ) -> dict[str, Any]:
        """The call's arguments, once the live payload is the approved one and the request
        records its hash; refused (journaled, compensated) otherwise."""
        stored = request.payload_sha256
        if stored is None or stored != payload_sha256(request.payload):
            message = "the approval request records no payload hash matching what was approved"
            self._refuse(request, bound, message, UnverifiableApprovalError, tail, requested_by)
        if not bound.matches(stored):
            self._refuse(request, bound, PAYLOAD_CHANGED, PayloadMismatchError, tail, requested_by)
        try:
            return decode_payload(payload)
        except SerializationError as exc:
            self._refuse(
                request,
                bound,
                f"approved payload is not replayable: {exc}",
                UnverifiableApprovalError,
                tail,
                requested_by,
            )

    def _check_policy(
        self,
        request: ApprovalRequest,
        tool: RegisteredTool,
        arguments: dict[str, Any],
        bound: Bound,
        tail: int,
        requested_by: str | None,
    ) -> None:
        """Refuse the call its tool's constraint refuses: ``CONSTRAINT_VIOLATED`` journaled
        and the saga compensated."""
        refusal = check_constraint(tool.definition, arguments)
        if refusal is None:
            return
        result = self._desk.close_and_compensate(
            request,
            self._desk.decision(
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
        raise ConstraintViolation(refusal, saga_id=request.saga_id, seq=request.seq, result=result)

    def _refuse(
        self,
        request: ApprovalRequest,
        bound: Bound,
        message: str,
        error: type[ApprovalError],
        tail: int,
        requested_by: str | None,
        *,
        detail: str | None = None,
    ) -> NoReturn:
        """Journal ``RESUME_REFUSED`` (the payload as a refusal journals it), compensate the
        saga and raise ``error`` carrying the result."""
        journaled = message if detail is None else f"{message}: {detail}"
        shown = {} if bound.sha256 is None else {attr.PAYLOAD_SHA256: bound.sha256}
        draft = self._desk.decision(
            request,
            EventType.RESUME_REFUSED,
            None,
            payload=bound.text,
            error=journaled,
            attributes={**shown, **_requested_by(requested_by), **bound.attributes()},
        )
        result = self._desk.close_and_compensate(
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

    # -- after the call -------------------------------------------------------------------
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

    # -- a resume that stopped half-way ---------------------------------------------------
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
        entries, state = self._desk.load(saga_id, seq)
        intent = interrupted_resume(entries, state)
        if intent is None:
            return None
        request = state.request
        bound = bind(self._s, entries, request, payload)
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
        raise self._in_doubt(request, intent, entries[-1].seq)

    def _in_doubt(
        self, request: ApprovalRequest, intent: JournalEntry, tail: int
    ) -> StepInDoubtError:
        """Journal the interrupted call ``SUSPECT`` and compensate the saga; the error to raise
        carries the result."""
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
        self._desk.append_decision(suspect, tail)
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
        return StepInDoubtError(message, saga_id=request.saga_id, seq=request.seq, result=result)


def _traced(tool: RegisteredTool) -> tuple[str, str]:
    return tool.name, tool.definition.reversibility.value


def _check_resume(seq: object, payload: object, requested_by: object) -> None:
    if requested_by is not None and (not isinstance(requested_by, str) or not requested_by.strip()):
        raise InvalidArgumentError(f"requested_by must be a non-empty str, got {requested_by!r}")
    if not isinstance(payload, str):
        raise InvalidArgumentError(
            f"payload must be the approved payload as a str, got {type(payload).__name__}"
        )
    check_seq(seq)


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
