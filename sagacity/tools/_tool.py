"""The hot path: what a wrapped tool does when it is called.

Outside any saga the tool runs straight through, unjournaled.  Inside one:

* the arguments become the payload (compact JSON by parameter name);
* a policy constraint that refuses the arguments journals ``CONSTRAINT_VIOLATED`` and the
  refusal text is returned instead of calling the tool;
* an ``IRREVERSIBLE`` / ``PRIVILEGED`` tool journals ``AWAITING_APPROVAL`` (the exact payload
  and its SHA-256), marks the run awaiting and returns
  ``[AWAITING_APPROVAL] Tool '<name>' requires human approval``: it is not called;
  unless a standing grant of the saga covers the call (:mod:`sagacity.gate._grants`): it then
  runs as below, its ``INTENT`` naming the grant;
* otherwise ``INTENT`` is journaled and acknowledged *before* the call (if the journal cannot
  take it, the tool is not called and the error propagates); then ``EXECUTED`` (the result) or
  ``FAILED`` (the error; the run is marked failed and the exception re-raised, including
  ``BaseException`` subclasses such as ``KeyboardInterrupt``).

A tool with an effect key (docs/adr/0026-effects-and-refusals.md) is looked up in the run's
effects first: a call whose effect an earlier call of the saga already has does not run
(:mod:`sagacity.effects._effect_calls`).  A call the tool refuses before acting (a declared
refusal, a framework's retry signal) is journaled ``FAILED`` with ``refused``: no failed step.

After a step of the run failed, and until a later success of the same tool (with the same
effect key, where it has one) recovers it, only a retry of that tool and reads run; anything
else is refused with :class:`SagaFailedError` without calling the tool or journaling anything:
unless recovered, the saga compensates on exit, so new side effects would only be undone again.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sagacity.chain import payload_sha256
from sagacity.effects._effect_calls import (
    AWAITING_PREFIX,
    EffectStop,
    awaiting_message,
    effect_stop,
    recorded_outcome,
)
from sagacity.effects._effects import EffectClaim, EffectHit, EffectState
from sagacity.effects._refusals import Refusals, refusal_of
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.entries._oversize import append_bounded, append_bounded_async
from sagacity.errors import (
    SagaClosedError,
    SagaError,
    SagaFailedError,
    WriterConflictError,
)
from sagacity.gate._grants import GrantUse
from sagacity.journal import Journal
from sagacity.saga._scope import SagaScope, current_caller, current_scope
from sagacity.telemetry import _tracing
from sagacity.tools._call_entries import (
    check_constraint,
    constraint_message,
    executed_draft,
    failed_draft,
    intent_draft,
    redacted_payload,
)
from sagacity.tools._codec import (
    call_arguments,
    describe_error,
    encode_payload,
)
from sagacity.tools._decorators import ToolDefinition
from sagacity.tools._registry import ToolRegistry
from sagacity.tools._reversibility import Reversibility

WRAPPED_ATTR = "__sagacity_wrapped__"


class Host(Protocol):
    """What the hot path needs from its :class:`~sagacity.Sagacity`."""

    @property
    def journal(self) -> Journal: ...
    @property
    def writer_id(self) -> str: ...
    @property
    def policy_version(self) -> str: ...
    @property
    def approval_ttl_us(self) -> int | None: ...
    @property
    def registry(self) -> ToolRegistry: ...
    def now_us(self) -> int: ...
    def covering_grant(
        self, definition: ToolDefinition, saga_id: str, payload: str
    ) -> GrantUse | None: ...


__all__ = [  # re-exported: where the hot path's callers have always found them
    "AWAITING_PREFIX",
    "awaiting_message",
    "check_constraint",
    "constraint_message",
    "executed_draft",
    "failed_draft",
    "intent_draft",
    "redacted_payload",
]


@dataclass(frozen=True, kw_only=True)
class _Stop:
    """The call does not run: journal ``draft`` and return ``value``."""

    draft: EntryDraft
    value: str
    gate: bool


@dataclass(frozen=True, kw_only=True)
class _Prepared:
    """What a call inside a saga does: stop (journal and return), or run after ``step``."""

    step: _Stop | EffectStop | EntryDraft
    claim: EffectClaim | None = None
    """The call's hold on its effect key while it runs (``None``: no key)."""

    @property
    def key(self) -> str | None:
        return self.claim.record.key if self.claim is not None else None


def _prepare(
    host: Host, definition: ToolDefinition, scope: SagaScope, arguments: Mapping[str, Any]
) -> _Prepared:
    clear = encode_payload(definition.name, arguments)
    redacted = redacted_payload(definition, clear)
    scope.note_redacted(redacted.values)
    payload = redacted.payload
    refusal = check_constraint(definition, arguments)
    now = host.now_us()
    caller = current_caller()
    said: dict[str, str] = {} if caller is None else {attr.CALLER: caller}
    if redacted.attribute is not None:
        said[attr.REDACTION] = redacted.attribute
    if refusal is not None:
        draft = EntryDraft(
            saga_id=scope.saga_id,
            event_type=EventType.CONSTRAINT_VIOLATED,
            tool=definition.name,
            payload=payload,
            error=refusal,
            actor=host.writer_id,
            attributes={attr.POLICY_VERSION: host.policy_version, **said},
            recorded_at_us=now,
        )
        return _Prepared(step=_Stop(draft=draft, value=refusal, gate=False))
    claim = _claim(host, definition, scope, clear)
    if isinstance(claim, EffectHit):
        recorded = None
        if claim.record.state is EffectState.EXECUTED and claim.same_arguments:
            recorded = recorded_outcome(host.journal, scope.saga_id, claim.record.outcome)
        stop = effect_stop(
            host,
            definition,
            scope.saga_id,
            claim,
            payload=payload,
            attributes=said,
            recorded=recorded,
        )
        return _Prepared(step=stop)
    grant = (
        host.covering_grant(definition, scope.saga_id, clear)
        if definition.reversibility.gated
        else None
    )
    if definition.reversibility.gated and grant is None:
        attributes = {
            attr.PAYLOAD_SHA256: payload_sha256(payload),
            attr.SIGNATURES_REQUIRED: str(definition.reversibility.signatures_required),
            attr.POLICY_VERSION: host.policy_version,
            attr.REVERSIBILITY: definition.reversibility.value,
            **said,
        }
        if host.approval_ttl_us is not None:
            attributes[attr.EXPIRES_AT_US] = str(now + host.approval_ttl_us)
        if definition.key is not None:
            attributes[attr.EFFECT_KEY] = definition.key.label
        draft = EntryDraft(
            saga_id=scope.saga_id,
            event_type=EventType.AWAITING_APPROVAL,
            tool=definition.name,
            payload=payload,
            actor=host.writer_id,
            attributes=attributes,
            recorded_at_us=now,
        )
        step = _Stop(draft=draft, value=awaiting_message(definition.name), gate=True)
        return _Prepared(step=step, claim=claim)
    intent = intent_draft(
        host,
        definition,
        scope.saga_id,
        payload,
        None,
        caller=caller,
        redaction=redacted.attribute,
    )
    if grant is not None:  # a standing grant covers the call (sagacity.gate._grants)
        intent = replace(intent, attributes={**intent.attributes, **grant.attributes()})
    return _Prepared(step=intent, claim=claim)


def _claim(
    host: Host, definition: ToolDefinition, scope: SagaScope, clear: str
) -> EffectHit | EffectClaim | None:
    """The call's claim on its effect key, or the earlier call that has it.  An earlier call
    waiting for approval is looked up on the chain first: another process decides on it."""
    found = scope.effects.claim(definition, clear)
    if isinstance(found, EffectHit) and found.record.state is EffectState.REQUESTED:
        scope.effects.refresh(host.journal.entries(scope.saga_id), host.registry)
        found = scope.effects.claim(definition, clear)
    return found


def _active_scope(host: Host, definition: ToolDefinition) -> SagaScope | None:
    scope = current_scope()
    if scope is None:
        return None
    if scope.owner is not host:
        raise SagaError(
            f"tool {definition.name!r} was wrapped by another Sagacity than the one running "
            f"saga {scope.saga_id!r}; wrap it with the Sagacity that opens the saga",
            saga_id=scope.saga_id,
        )
    if scope.closed:
        raise SagaClosedError(
            f"saga {scope.saga_id!r} has ended; tool {definition.name!r} was not called "
            "(a task outlived its saga?)",
            saga_id=scope.saga_id,
        )
    lost = scope.lost
    if lost is not None:
        raise SagaFailedError(
            f"saga {scope.saga_id!r} was taken over by another writer ({lost}); tool "
            f"{definition.name!r} was not called",
            saga_id=scope.saga_id,
        )
    reads = definition.reversibility is Reversibility.READ
    failure = scope.blocking(definition.name, reads=reads)
    if failure is not None:
        raise SagaFailedError(
            f"saga {scope.saga_id!r} already has a failed step "
            f"({failure.tool} at seq {failure.seq}: {failure.error}); tool "
            f"{definition.name!r} was not called because the saga will be compensated "
            f"unless a retry of {failure.tool!r} succeeds (only it and reads run until then)",
            saga_id=scope.saga_id,
            seq=failure.seq,
        )
    return scope


def _stopped(scope: SagaScope, prepared: _Prepared, entry: JournalEntry | None, told: bool) -> Any:
    """What a call that did not run returns, once its stop is journaled (``entry``)."""
    step, claim = prepared.step, prepared.claim
    if isinstance(step, EffectStop):
        step.after(scope, key=step.record.key or f"seq:{step.record.seq}")
        notice = step.notice
        if notice.kind == "replayed":
            return notice.told() if told else notice.value
        return notice
    assert isinstance(step, _Stop)
    if step.gate and entry is not None:
        if claim is not None:
            claim.requested(entry.seq)
        scope.mark_awaiting(tool=entry.tool or "", seq=entry.seq)
    elif claim is not None:
        claim.release()
    return step.value


def _unclaimed(scope: SagaScope, prepared: _Prepared, exc: BaseException) -> None:
    """Journaling the call's first entry failed: nothing ran."""
    if isinstance(exc, WriterConflictError):
        scope.mark_lost(exc.message)
    if prepared.claim is not None:
        prepared.claim.release()


def _failed(
    scope: SagaScope,
    prepared: _Prepared,
    intent: JournalEntry,
    failed: JournalEntry | None,
    exc: BaseException,
    refused: str | None,
) -> None:
    """The tool raised (``failed``: its journaled ``FAILED``, ``None`` if it could not be)."""
    if prepared.claim is not None:
        if failed is None:
            prepared.claim.in_doubt(intent)  # the chain shows the call without an outcome
        else:
            prepared.claim.release()
    if refused is None or failed is None:
        _record_failure(scope, failed or intent, exc, prepared.key)


def _unrecorded(
    scope: SagaScope, prepared: _Prepared, intent: JournalEntry, exc: BaseException
) -> None:
    """The tool ran and its ``EXECUTED`` could not be journaled: the call is in doubt."""
    if prepared.claim is not None:
        prepared.claim.in_doubt(intent)
    if isinstance(exc, WriterConflictError):
        scope.mark_lost(exc.message)
    else:
        _record_failure(scope, intent, exc, prepared.key)


def _record_failure(
    scope: SagaScope, intent: JournalEntry, exc: BaseException, key: str | None = None
) -> None:
    # A journaled FAILED's error is the one the saga reports (cut short if it had to be).
    error = intent.error if intent.event_type is EventType.FAILED and intent.error else None
    scope.mark_failed(tool=intent.tool, seq=intent.seq, error=error or describe_error(exc), key=key)


def journaled_call(
    host: Host,
    definition: ToolDefinition,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Any],
    *,
    refuses: Refusals = (),
    told: bool = False,
) -> Any:
    """Run ``call()`` as one journaled tool call of ``definition``: the sync hot path.

    ``arguments`` produces the call's arguments by parameter name (evaluated only inside a
    saga).  Outside a saga ``call()`` runs straight through.  This is what
    :func:`wrap_function` does for a declared function, and what framework adapters use for
    a tool whose arguments the framework has already parsed.

    Args:
        refuses: the caller's retry signals (a framework's): raised by the tool, the call is
            journaled as a refusal, as for the exceptions the declaration names.
        told: the result goes to a model: a replayed call returns its line and the recorded
            result (a :class:`~sagacity.effects._effect_calls.Notice`) rather than the result alone.
    """
    scope = _active_scope(host, definition)
    if scope is None:
        return call()
    run = _Run(host, definition, scope, refuses, told)
    if _tracing.tracer is not None:
        with _tracing.tracer.tool(*_traced(definition), scope) as span:
            return _journaled(run, arguments, call, span)
    return _journaled(run, arguments, call, None)


@dataclass(frozen=True)
class _Run:
    """One call's context on the hot path."""

    host: Host
    definition: ToolDefinition
    scope: SagaScope
    refuses: Refusals
    told: bool


def _traced(definition: ToolDefinition) -> tuple[str, str, bool]:
    return definition.name, definition.reversibility.value, definition.reversibility.gated


def _journaled(
    run: _Run,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Any],
    span: _tracing.Span | None,
) -> Any:
    host, definition, scope = run.host, run.definition, run.scope
    prepared = _prepare(host, definition, scope, arguments())
    step, journal = prepared.step, host.journal
    try:
        if not isinstance(step, EntryDraft):
            entry = None
            if step.draft is not None:
                entry = append_bounded(journal, step.draft, durable=True, redacted=scope.redacted)
                if span is not None:
                    span.journaled(entry)
            return _stopped(scope, prepared, entry, run.told)
        intent = journal.append(step, durable=True)
        if span is not None:
            span.journaled(intent)
    except BaseException as exc:
        _unclaimed(scope, prepared, exc)
        raise
    if prepared.claim is not None:
        prepared.claim.started(intent.seq)
    try:
        value = call()
    except BaseException as exc:
        refused = refusal_of(exc, definition.refuses, run.refuses)
        failed = _journal_failed(journal, host, definition, intent, exc, scope.redacted, refused)
        _failed(scope, prepared, intent, failed, exc, refused)
        raise
    recovers = scope.mark_succeeded(definition.name, prepared.key)
    draft = executed_draft(host, definition, intent, value, recovers=recovers)
    try:
        executed = append_bounded(journal, draft, redacted=scope.redacted)
    except BaseException as exc:
        _unrecorded(scope, prepared, intent, exc)
        raise
    if prepared.claim is not None:
        prepared.claim.executed(executed.seq)
    return value


async def journaled_call_async(
    host: Host,
    definition: ToolDefinition,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Awaitable[Any]],
    *,
    refuses: Refusals = (),
    told: bool = False,
) -> Any:
    """:func:`journaled_call` for asyncio: ``call()`` is awaited, the journal's async API used."""
    scope = _active_scope(host, definition)
    if scope is None:
        return await call()
    run = _Run(host, definition, scope, refuses, told)
    if _tracing.tracer is not None:
        with _tracing.tracer.tool(*_traced(definition), scope) as span:
            return await _journaled_async(run, arguments, call, span)
    return await _journaled_async(run, arguments, call, None)


async def _journaled_async(
    run: _Run,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Awaitable[Any]],
    span: _tracing.Span | None,
) -> Any:
    host, definition, scope = run.host, run.definition, run.scope
    if definition.key is None and not definition.reversibility.gated:
        prepared = _prepare(host, definition, scope, arguments())
    else:  # an earlier call with its key, or the saga's grants, may be read from the chain
        prepared = await asyncio.to_thread(_prepare, host, definition, scope, arguments())
    step, journal = prepared.step, host.journal
    try:
        if not isinstance(step, EntryDraft):
            entry = None
            if step.draft is not None:
                entry = await append_bounded_async(
                    journal, step.draft, durable=True, redacted=scope.redacted
                )
                if span is not None:
                    span.journaled(entry)
            return _stopped(scope, prepared, entry, run.told)
        intent = await journal.append_async(step, durable=True)
        if span is not None:
            span.journaled(intent)
    except BaseException as exc:
        _unclaimed(scope, prepared, exc)
        raise
    if prepared.claim is not None:
        prepared.claim.started(intent.seq)
    try:
        value = await call()
    except BaseException as exc:
        refused = refusal_of(exc, definition.refuses, run.refuses)
        failed = await _journal_failed_async(
            journal, host, definition, intent, exc, scope.redacted, refused
        )
        _failed(scope, prepared, intent, failed, exc, refused)
        raise
    recovers = scope.mark_succeeded(definition.name, prepared.key)
    draft = executed_draft(host, definition, intent, value, recovers=recovers)
    try:
        executed = await append_bounded_async(journal, draft, redacted=scope.redacted)
    except BaseException as exc:
        _unrecorded(scope, prepared, intent, exc)
        raise
    if prepared.claim is not None:
        prepared.claim.executed(executed.seq)
    return value


def wrap_function(
    host: Host, definition: ToolDefinition, function: Callable[..., Any]
) -> Callable[..., Any]:
    """The journaling callable for ``function`` (already bound to its object, if a method)."""
    signature = inspect.signature(function)

    if definition.is_async:

        @functools.wraps(function)
        async def async_tool(*args: Any, **kwargs: Any) -> Any:
            return await journaled_call_async(
                host,
                definition,
                lambda: call_arguments(signature, args, kwargs),
                lambda: function(*args, **kwargs),
            )

        setattr(async_tool, WRAPPED_ATTR, True)
        return async_tool

    @functools.wraps(function)
    def tool(*args: Any, **kwargs: Any) -> Any:
        return journaled_call(
            host,
            definition,
            lambda: call_arguments(signature, args, kwargs),
            lambda: function(*args, **kwargs),
        )

    setattr(tool, WRAPPED_ATTR, True)
    return tool


def _journal_failed(
    journal: Journal,
    host: Host,
    definition: ToolDefinition,
    intent: JournalEntry,
    exc: BaseException,
    redacted: frozenset[str],
    refused: str | None = None,
) -> JournalEntry | None:
    try:
        return append_bounded(
            journal, failed_draft(host, definition, intent, exc, refused), redacted=redacted
        )
    except Exception as journal_exc:
        # The tool's own exception matters more to the caller; the INTENT without an outcome
        # is reported SUSPECT at compensation, so nothing is silently lost.
        exc.add_note(f"sagacity: FAILED could not be journaled: {describe_error(journal_exc)}")
        return None


async def _journal_failed_async(
    journal: Journal,
    host: Host,
    definition: ToolDefinition,
    intent: JournalEntry,
    exc: BaseException,
    redacted: frozenset[str],
    refused: str | None = None,
) -> JournalEntry | None:
    try:
        return await append_bounded_async(
            journal, failed_draft(host, definition, intent, exc, refused), redacted=redacted
        )
    except Exception as journal_exc:
        exc.add_note(f"sagacity: FAILED could not be journaled: {describe_error(journal_exc)}")
        return None
