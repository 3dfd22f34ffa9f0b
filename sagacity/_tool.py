"""The hot path: what a wrapped tool does when it is called.

Outside any saga the tool runs straight through, unjournaled.  Inside one:

* the arguments become the payload (compact JSON by parameter name);
* a policy constraint that refuses the arguments journals ``CONSTRAINT_VIOLATED`` and the
  refusal text is returned instead of calling the tool;
* an ``IRREVERSIBLE`` / ``PRIVILEGED`` tool journals ``AWAITING_APPROVAL`` (the exact payload
  and its SHA-256), marks the run awaiting and returns
  ``[AWAITING_APPROVAL] Tool '<name>' requires human approval``: it is not called;
* otherwise ``INTENT`` is journaled and acknowledged *before* the call (if the journal cannot
  take it, the tool is not called and the error propagates); then ``EXECUTED`` (the result) or
  ``FAILED`` (the error; the run is marked failed and the exception re-raised, including
  ``BaseException`` subclasses such as ``KeyboardInterrupt``).

After a step of the run failed, further calls are refused with :class:`SagaFailedError`
without calling the tool or journaling anything: the saga compensates on exit, so new side
effects would only be undone again.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sagacity import _attributes as attr
from sagacity import _tracing
from sagacity._codec import (
    call_arguments,
    decode_payload,
    describe_error,
    dumps,
    encode_payload,
    encode_result,
    result_data,
)
from sagacity._decorators import ToolDefinition
from sagacity._events import EntryDraft, EventType, JournalEntry
from sagacity._oversize import append_bounded, append_bounded_async
from sagacity._redaction import Redacted, redact
from sagacity._scope import SagaScope, current_caller, current_scope
from sagacity._undo import Undo, extract_undo, undo_declared
from sagacity.chain import payload_sha256
from sagacity.errors import (
    SagaClosedError,
    SagaError,
    SagaFailedError,
    SerializationError,
    WriterConflictError,
)
from sagacity.journal import Journal

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
    def now_us(self) -> int: ...


AWAITING_PREFIX = "[AWAITING_APPROVAL]"
"""How the text a gated call returns instead of running begins."""


def awaiting_message(tool: str) -> str:
    """What a gated call returns to its caller instead of running."""
    return f"{AWAITING_PREFIX} Tool '{tool}' requires human approval"


def constraint_message(tool: str, reason: str) -> str:
    """What a call refused by a policy constraint returns (and journals)."""
    return f"[constraint] {tool}: {reason}"


def check_constraint(definition: ToolDefinition, arguments: Mapping[str, Any]) -> str | None:
    """The constraint's refusal text for ``arguments``, or ``None`` when allowed.

    A constraint that raises refuses: the policy path fails closed.
    """
    if definition.constraint is None:
        return None
    try:
        reason = definition.constraint(dict(arguments))
    except Exception as exc:
        reason = f"the policy constraint could not be evaluated ({describe_error(exc)})"
    if reason is None:
        return None
    return constraint_message(definition.name, str(reason) or "refused by policy")


@dataclass(frozen=True, kw_only=True)
class _Stop:
    """The call does not run: journal ``draft`` and return ``value``."""

    draft: EntryDraft
    value: str
    gate: bool


def executed_draft(
    host: Host, definition: ToolDefinition, intent: JournalEntry, value: object
) -> EntryDraft:
    """The ``EXECUTED`` entry for ``value`` returned by the call journaled as ``intent``."""
    text, encoding = encode_result(value)
    attributes = {
        attr.REF_SEQ: str(intent.seq),
        attr.REVERSIBILITY: definition.reversibility.value,
        attr.RESULT_ENCODING: encoding,
    }
    if definition.undo_call is not None:
        try:
            undo: Undo | object | None = definition.undo_call.render(
                arguments=decode_payload(intent.payload or "{}"),
                result=result_data(text, encoding),
            )
        except SerializationError:
            undo = None  # journaled undo=none: compensation reports the step dirty, by name
        _record_undo(attributes, undo)
    elif definition.by is None and definition.reversibility.undoable:
        _record_undo(attributes, extract_undo(value))
    return EntryDraft(
        saga_id=intent.saga_id,
        event_type=EventType.EXECUTED,
        tool=definition.name,
        result=text,
        actor=host.writer_id,
        attributes=attributes,
        recorded_at_us=host.now_us(),
    )


def _record_undo(attributes: dict[str, str], undo: object) -> None:
    """Record on ``EXECUTED`` the undo a result carries (or that none exists)."""
    if isinstance(undo, Undo):
        attributes[attr.UNDO] = "tool"
        attributes[attr.UNDO_TOOL] = undo.tool
        try:
            attributes[attr.UNDO_ARGUMENTS] = dumps(dict(undo.arguments))
        except (TypeError, ValueError):
            attributes[attr.UNDO] = "none"
            del attributes[attr.UNDO_TOOL]
    elif undo is None and undo_declared(undo):
        attributes[attr.UNDO] = "none"


def failed_draft(
    host: Host, definition: ToolDefinition, intent: JournalEntry, exc: BaseException
) -> EntryDraft:
    """The ``FAILED`` entry for the call journaled as ``intent``."""
    return EntryDraft(
        saga_id=intent.saga_id,
        event_type=EventType.FAILED,
        tool=definition.name,
        error=describe_error(exc),
        actor=host.writer_id,
        attributes={
            attr.REF_SEQ: str(intent.seq),
            attr.REVERSIBILITY: definition.reversibility.value,
        },
        recorded_at_us=host.now_us(),
    )


def intent_draft(
    host: Host,
    definition: ToolDefinition,
    saga_id: str,
    payload: str,
    ref_seq: int | None,
    *,
    caller: str | None = None,
    redaction: str | None = None,
) -> EntryDraft:
    """The ``INTENT`` entry journaled before a call (``ref_seq``: the approved request;
    ``caller``: the authenticated principal the call came from, when known; ``payload``
    already redacted, ``redaction`` its salts' attribute)."""
    attributes = {attr.REVERSIBILITY: definition.reversibility.value}
    if ref_seq is not None:
        attributes[attr.REF_SEQ] = str(ref_seq)
    if caller is not None:
        attributes[attr.CALLER] = caller
    if redaction is not None:
        attributes[attr.REDACTION] = redaction
    return EntryDraft(
        saga_id=saga_id,
        event_type=EventType.INTENT,
        tool=definition.name,
        payload=payload,
        actor=host.writer_id,
        attributes=attributes,
        recorded_at_us=host.now_us(),
    )


def redacted_payload(
    definition: ToolDefinition, payload: str, salts: Mapping[str, str] | None = None
) -> Redacted:
    """``payload`` as journaled for ``definition``: its ``redact`` fields replaced by their
    redaction keys (``salts``: reused for their paths, e.g. a request's at resume).

    Raises:
        SerializationError: a redacted path runs into a value that is not an object.
    """
    return redact(definition.name, payload, definition.redact, salts)


def _stop_or_intent(
    host: Host, definition: ToolDefinition, scope: SagaScope, arguments: Mapping[str, Any]
) -> _Stop | EntryDraft:
    redacted = redacted_payload(definition, encode_payload(definition.name, arguments))
    scope.note_redacted(redacted.values)
    payload = redacted.payload
    refusal = check_constraint(definition, arguments)
    now = host.now_us()
    caller = current_caller()
    redaction = redacted.attribute
    if refusal is not None:
        refused = {attr.POLICY_VERSION: host.policy_version}
        if caller is not None:
            refused[attr.CALLER] = caller
        if redaction is not None:
            refused[attr.REDACTION] = redaction
        draft = EntryDraft(
            saga_id=scope.saga_id,
            event_type=EventType.CONSTRAINT_VIOLATED,
            tool=definition.name,
            payload=payload,
            error=refusal,
            actor=host.writer_id,
            attributes=refused,
            recorded_at_us=now,
        )
        return _Stop(draft=draft, value=refusal, gate=False)
    if definition.reversibility.gated:
        attributes = {
            attr.PAYLOAD_SHA256: payload_sha256(payload),
            attr.SIGNATURES_REQUIRED: str(definition.reversibility.signatures_required),
            attr.POLICY_VERSION: host.policy_version,
            attr.REVERSIBILITY: definition.reversibility.value,
        }
        if caller is not None:
            attributes[attr.CALLER] = caller
        if host.approval_ttl_us is not None:
            attributes[attr.EXPIRES_AT_US] = str(now + host.approval_ttl_us)
        if redaction is not None:
            attributes[attr.REDACTION] = redaction
        draft = EntryDraft(
            saga_id=scope.saga_id,
            event_type=EventType.AWAITING_APPROVAL,
            tool=definition.name,
            payload=payload,
            actor=host.writer_id,
            attributes=attributes,
            recorded_at_us=now,
        )
        return _Stop(draft=draft, value=awaiting_message(definition.name), gate=True)
    return intent_draft(
        host, definition, scope.saga_id, payload, None, caller=caller, redaction=redaction
    )


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
    failure = scope.failure
    if failure is not None:
        raise SagaFailedError(
            f"saga {scope.saga_id!r} already has a failed step "
            f"({failure.tool} at seq {failure.seq}: {failure.error}); tool "
            f"{definition.name!r} was not called because the saga will be compensated",
            saga_id=scope.saga_id,
            seq=failure.seq,
        )
    return scope


def _after_stop(scope: SagaScope, stop: _Stop, entry: JournalEntry) -> str:
    if stop.gate:
        scope.mark_awaiting(tool=entry.tool or "", seq=entry.seq)
    return stop.value


def _record_failure(scope: SagaScope, intent: JournalEntry, exc: BaseException) -> None:
    # A journaled FAILED's error is the one the saga reports (cut short if it had to be).
    error = intent.error if intent.event_type is EventType.FAILED and intent.error else None
    scope.mark_failed(tool=intent.tool, seq=intent.seq, error=error or describe_error(exc))


def journaled_call(
    host: Host,
    definition: ToolDefinition,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Any],
) -> Any:
    """Run ``call()`` as one journaled tool call of ``definition``: the sync hot path.

    ``arguments`` produces the call's arguments by parameter name (evaluated only inside a
    saga).  Outside a saga ``call()`` runs straight through.  This is what
    :func:`wrap_function` does for a declared function, and what framework adapters use for
    a tool whose arguments the framework has already parsed.
    """
    scope = _active_scope(host, definition)
    if scope is None:
        return call()
    if _tracing.tracer is not None:
        with _tracing.tracer.tool(*_traced(definition), scope) as span:
            return _journaled(host, definition, scope, arguments, call, span)
    return _journaled(host, definition, scope, arguments, call, None)


def _traced(definition: ToolDefinition) -> tuple[str, str, bool]:
    return definition.name, definition.reversibility.value, definition.reversibility.gated


def _journaled(
    host: Host,
    definition: ToolDefinition,
    scope: SagaScope,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Any],
    span: _tracing.Span | None,
) -> Any:
    step = _stop_or_intent(host, definition, scope, arguments())
    journal = host.journal
    try:
        if isinstance(step, _Stop):
            stopped = append_bounded(journal, step.draft, durable=True, redacted=scope.redacted)
            if span is not None:
                span.journaled(stopped)
            return _after_stop(scope, step, stopped)
        intent = journal.append(step, durable=True)
        if span is not None:
            span.journaled(intent)
    except WriterConflictError as exc:
        scope.mark_lost(exc.message)
        raise
    try:
        value = call()
    except BaseException as exc:
        failed = _journal_failed(journal, host, definition, intent, exc, scope.redacted)
        _record_failure(scope, failed or intent, exc)
        raise
    try:
        append_bounded(
            journal, executed_draft(host, definition, intent, value), redacted=scope.redacted
        )
    except WriterConflictError as exc:
        scope.mark_lost(exc.message)
        raise
    except BaseException as exc:
        _record_failure(scope, intent, exc)
        raise
    return value


async def journaled_call_async(
    host: Host,
    definition: ToolDefinition,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Awaitable[Any]],
) -> Any:
    """:func:`journaled_call` for asyncio: ``call()`` is awaited, the journal's async API used."""
    scope = _active_scope(host, definition)
    if scope is None:
        return await call()
    if _tracing.tracer is not None:
        with _tracing.tracer.tool(*_traced(definition), scope) as span:
            return await _journaled_async(host, definition, scope, arguments, call, span)
    return await _journaled_async(host, definition, scope, arguments, call, None)


async def _journaled_async(
    host: Host,
    definition: ToolDefinition,
    scope: SagaScope,
    arguments: Callable[[], Mapping[str, Any]],
    call: Callable[[], Awaitable[Any]],
    span: _tracing.Span | None,
) -> Any:
    step = _stop_or_intent(host, definition, scope, arguments())
    journal = host.journal
    try:
        if isinstance(step, _Stop):
            stopped = await append_bounded_async(
                journal, step.draft, durable=True, redacted=scope.redacted
            )
            if span is not None:
                span.journaled(stopped)
            return _after_stop(scope, step, stopped)
        intent = await journal.append_async(step, durable=True)
        if span is not None:
            span.journaled(intent)
    except WriterConflictError as exc:
        scope.mark_lost(exc.message)
        raise
    try:
        value = await call()
    except BaseException as exc:
        failed = await _journal_failed_async(journal, host, definition, intent, exc, scope.redacted)
        _record_failure(scope, failed or intent, exc)
        raise
    try:
        await append_bounded_async(
            journal, executed_draft(host, definition, intent, value), redacted=scope.redacted
        )
    except WriterConflictError as exc:
        scope.mark_lost(exc.message)
        raise
    except BaseException as exc:
        _record_failure(scope, intent, exc)
        raise
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
) -> JournalEntry | None:
    try:
        return append_bounded(
            journal, failed_draft(host, definition, intent, exc), redacted=redacted
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
) -> JournalEntry | None:
    try:
        return await append_bounded_async(
            journal, failed_draft(host, definition, intent, exc), redacted=redacted
        )
    except Exception as journal_exc:
        exc.add_note(f"sagacity: FAILED could not be journaled: {describe_error(journal_exc)}")
        return None
