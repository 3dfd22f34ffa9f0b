"""OpenTelemetry spans: sagas, tool calls, gates, decisions, undos and archive batches.

Off unless enabled (:func:`enable`, or :func:`configure_from_env` from the standard ``OTEL_*``
variables, which the services and ``Sagacity.from_env()`` call).  Off, nothing of
OpenTelemetry is imported and the hot path pays one module attribute check (:data:`tracer`
is ``None``); on, it needs the ``otel`` extra.  docs/operations/tracing.md lists the spans.

The trace crosses processes the way the journal does: while a span is current its W3C
``traceparent`` is :data:`~sagacity.telemetry._traceparent.current_traceparent`, so every event
appended under it carries it as a Kafka header; a service acting on an event continues that event's
trace (``parent=`` its header).  Attributes name the saga, the seq, the tool, its
reversibility and the outcome, never a payload, a result or an error message (a tool's
arguments may be redacted fields): an error is recorded by its type only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sagacity.entries._events import EventType
from sagacity.telemetry._traceparent import current_traceparent, valid_traceparent

if TYPE_CHECKING:
    from sagacity.entries._events import JournalEntry
    from sagacity.saga._result import SagaResult
    from sagacity.undo._compensation import CompensationCall

log = logging.getLogger("sagacity.tracing")

T = TypeVar("T")


class _HasScope(Protocol):
    @property
    def scope(self) -> object: ...


R = TypeVar("R", bound=_HasScope)

SCOPE = "sagacity"
"""The instrumentation scope of every span."""

MAX_LINKS = 64
"""The most links an archive batch's span carries (one per traced event)."""

SAGA_ID = "sagacity.saga.id"
SEQ = "sagacity.seq"
REVERSIBILITY = "sagacity.tool.reversibility"
OUTCOME = "sagacity.outcome"
TOOL = "gen_ai.tool.name"

_OUTCOMES: dict[object, str] = {
    EventType.INTENT: "executed",
    EventType.AWAITING_APPROVAL: "awaiting_approval",
    EventType.CONSTRAINT_VIOLATED: "refused",
    EventType.REPLAYED: "replayed",
    EventType.SUSPECT: "in_doubt",
}


class Span:
    """One span while it is current: attributes to add before it ends.

    A no-op where tracing is off (:data:`NOOP`), so call sites never check.
    """

    __slots__ = ("_otel", "_outcome")

    def __init__(self, otel: Any = None) -> None:
        self._otel = otel
        self._outcome: str | None = None

    @property
    def outcome(self) -> str | None:
        """``sagacity.outcome`` when the span ends (set by the call site or the tracer)."""
        return self._outcome

    @outcome.setter
    def outcome(self, value: str | None) -> None:
        if self._otel is not None:  # the shared no-op span keeps nothing
            self._outcome = value

    def set(self, key: str, value: str | int | bool) -> None:
        """Set attribute ``key`` (a name, a number: never a payload value)."""
        if self._otel is not None:
            self._otel.set_attribute(key, value)

    def journaled(self, entry: JournalEntry) -> None:
        """A tool call journaled ``entry``: its seq (the first one's) and what it means."""
        if self._otel is None:
            return
        if self.outcome is None:
            self._otel.set_attribute(SEQ, entry.seq)
        self.outcome = _OUTCOMES.get(entry.event_type) or self.outcome

    def ended(self, result: SagaResult) -> SagaResult:
        """The saga (or decision) ended with ``result``: its status is the outcome."""
        self.outcome = result.status.value
        return result

    def rename(self, name: str) -> None:
        """Rename the span (once what it acts on is known)."""
        if self._otel is not None:
            self._otel.update_name(name)


NOOP = Span()
"""The span handed out while tracing is off."""


class Tracer:
    """Makes Sagacity's spans with an OpenTelemetry tracer provider (the ``otel`` extra).

    Args:
        provider: an OpenTelemetry ``TracerProvider``; default the global one.
    """

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._context = context
        source = provider if provider is not None else trace.get_tracer_provider()
        self._tracer = source.get_tracer(SCOPE)
        self._runs: weakref.WeakKeyDictionary[object, Any] = weakref.WeakKeyDictionary()

    # --- the one span maker -----------------------------------------------------------------
    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        attributes: Mapping[str, str | int | bool] | None = None,
        parent: str | None = None,
        links: Iterable[str] = (),
        fallback: Any = None,
    ) -> Iterator[Span]:
        """A span named ``name``, current for the block (events appended in it carry it).

        Args:
            parent: a W3C ``traceparent`` to continue (an event's header); default the
                current span, else ``fallback`` (an open saga run's span), else a new trace.
            links: ``traceparent``s this span relates to without being their child.
        """
        trace = self._trace
        context = None
        remote = _span_context(trace, parent)
        if remote is not None:
            context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        elif fallback is not None and not trace.get_current_span().get_span_context().is_valid:
            context = trace.set_span_in_context(fallback)
        otel_links = [
            trace.Link(found)
            for found in (_span_context(trace, link) for link in links)
            if found is not None
        ]
        otel = self._tracer.start_span(
            name, context=context, attributes=dict(attributes or {}), links=otel_links
        )
        handle = Span(otel)
        token = self._context.attach(trace.set_span_in_context(otel, context))
        header = current_traceparent.set(_w3c(otel.get_span_context()))
        try:
            yield handle
        except BaseException as exc:
            otel.set_attribute("error.type", type(exc).__qualname__)
            otel.set_status(trace.Status(trace.StatusCode.ERROR))
            if handle.outcome is None or handle.outcome == "executed":
                handle.outcome = "failed"
            raise
        finally:
            current_traceparent.reset(header)
            self._context.detach(token)
            if handle.outcome is not None:
                otel.set_attribute(OUTCOME, handle.outcome)
            otel.end()

    # --- the spans of the core --------------------------------------------------------------
    @contextlib.contextmanager
    def saga(self, saga_id: str) -> Iterator[Span]:
        """A saga run by :meth:`Sagacity.saga` (outcome: its status)."""
        with self.span("saga", attributes={SAGA_ID: saga_id}) as span:
            yield span

    @contextlib.contextmanager
    def tool(
        self,
        name: str,
        reversibility: str,
        gated: bool,
        scope: object,
        *,
        saga_id: str | None = None,
    ) -> Iterator[Span]:
        """One journaled tool call: the GenAI conventions' ``execute_tool {tool}`` span; for a
        gated tool, a ``request_approval {tool}`` span in it, current while the request is
        journaled (its ``traceparent`` is the one the decisions continue)."""
        attributes: dict[str, str | int | bool] = {
            "gen_ai.operation.name": "execute_tool",
            TOOL: name,
            "gen_ai.tool.type": "function",
            REVERSIBILITY: reversibility,
            SAGA_ID: saga_id if saga_id is not None else str(getattr(scope, "saga_id", "")),
        }
        call_id = tool_call_id.get()
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        run = self._runs.get(scope) if scope is not None else None
        with self.span(f"execute_tool {name}", attributes=attributes, fallback=run) as span:
            if not gated:
                yield span
                return
            gate = {TOOL: name, REVERSIBILITY: reversibility, SAGA_ID: attributes[SAGA_ID]}
            with self.span(f"request_approval {name}", attributes=gate) as inner:
                yield _Both(span, inner)

    def run_opened(self, saga_id: str, open_: Callable[[], R]) -> R:
        """Start the span of a saga held open across calls (``open_`` makes the
        :class:`~sagacity.SagaRun`): the parent of the run's tool calls made outside any other
        span, ended by :meth:`run_ended`."""
        otel = self._tracer.start_span("saga", attributes={SAGA_ID: saga_id})
        token = self._context.attach(self._trace.set_span_in_context(otel))
        header = current_traceparent.set(_w3c(otel.get_span_context()))
        try:
            run = open_()
        except BaseException as exc:
            otel.set_attribute("error.type", type(exc).__qualname__)
            otel.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
            otel.end()
            raise
        finally:
            current_traceparent.reset(header)
            self._context.detach(token)
        self._runs[run.scope] = otel
        return run

    def run_ended(self, scope: object, result: SagaResult) -> None:
        """End the span :meth:`run_opened` started for ``scope``."""
        otel = self._runs.pop(scope, None)
        if otel is not None:
            otel.set_attribute(OUTCOME, result.status.value)
            otel.end()

    @contextlib.contextmanager
    def undo(self, call: CompensationCall) -> Iterator[Span]:
        """One undo (a compensation or undo tool) of the step ``call`` undoes."""
        attributes: dict[str, str | int | bool] = {
            SAGA_ID: call.saga_id,
            SEQ: call.seq,
            TOOL: call.step.tool or "",
            "sagacity.undo.target": call.target,
        }
        with self.span(f"undo {call.step.tool or call.target}", attributes=attributes) as span:
            yield span
            span.outcome = "compensated"


class _Both(Span):
    """The gate's span and its tool call's span: what one is told, both are."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, outer: Span, inner: Span) -> None:
        super().__init__(None)
        self._outer = outer
        self._inner = inner

    def set(self, key: str, value: str | int | bool) -> None:
        self._inner.set(key, value)
        self._outer.set(key, value)

    def journaled(self, entry: JournalEntry) -> None:
        self._inner.journaled(entry)
        self._outer.journaled(entry)


tracer: Tracer | None = None
"""The tracer while tracing is on; ``None`` (the hot path's one check) while it is off."""

tool_call_id: ContextVar[str | None] = ContextVar("sagacity_tool_call_id", default=None)
"""The agent framework's id of the tool call being made (its ``gen_ai.tool.call.id``); set by
:func:`calling_tool` where a framework gives one."""


@contextlib.contextmanager
def calling_tool(call_id: str | None) -> Iterator[None]:
    """Within the block, a tool call's span names ``call_id`` (the framework's id of it);
    ``None`` (a framework that gave none here) keeps the id an outer block set."""
    if call_id is None:
        yield
        return
    token = tool_call_id.set(call_id)
    try:
        yield
    finally:
        tool_call_id.reset(token)


def enable(tracer_provider: Any = None) -> None:
    """Make spans with ``tracer_provider`` (an OpenTelemetry ``TracerProvider``; default the
    global one, which the application configures).

    Raises:
        ConfigurationError: OpenTelemetry is not installed (the ``otel`` extra).
    """
    global tracer
    if importlib.util.find_spec("opentelemetry") is None:
        from sagacity.errors import ConfigurationError

        raise ConfigurationError(
            "tracing needs OpenTelemetry: pip install 'sagacity[otel]' (docs/operations/tracing.md)"
        )
    tracer = Tracer(tracer_provider)


def disable() -> None:
    """Stop making spans (the providers and their exporters are the application's)."""
    global tracer
    tracer = None


def configure_from_env(service_name: str) -> bool:
    """Turn tracing on from the standard ``OTEL_*`` variables; return whether it is on.

    Tracing is asked for when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, the
    default, or ``console``) or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and ``OTEL_SDK_DISABLED`` is not ``true``.  A
    global SDK provider the application set is used as it is; otherwise one is made with the
    service's name (``OTEL_SERVICE_NAME`` overrides ``service_name``), the sampler the
    ``OTEL_TRACES_SAMPLER`` variables name and a batching exporter (OTLP over HTTP/protobuf,
    configured by the ``OTEL_EXPORTER_OTLP_*`` variables).  Without the ``otel`` extra it
    warns once and stays off.
    """
    if tracer is not None:
        return True
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [
        name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name
    ]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if (not exporters and not endpoint) or exporters == ["none"]:
        return False
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        log.warning(
            "OTEL_* variables ask for traces but the otel extra is not installed: "
            "pip install 'sagacity[otel]' (no spans are made)"
        )
        return False
    enable(_provider(service_name, exporters or ["otlp"]))
    return True


def _provider(service_name: str, exporters: list[str]) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current  # the application configured its own
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name != "none":
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported here (otlp, console)", name)
    trace.set_tracer_provider(provider)
    return provider


# --- module-level helpers: a no-op span while tracing is off ------------------------------
def span(
    name: str,
    *,
    attributes: Mapping[str, str | int | bool] | None = None,
    parent: str | None = None,
    links: Iterable[str] = (),
) -> contextlib.AbstractContextManager[Span]:
    """:meth:`Tracer.span` while tracing is on, else a block that does nothing."""
    current = tracer
    if current is None:
        return contextlib.nullcontext(NOOP)
    return current.span(name, attributes=attributes, parent=parent, links=links)


def resumed(name: str, reversibility: str, intent: JournalEntry, call: Callable[[], T]) -> T:
    """``call()``, the approved call a resume makes after its ``INTENT``, in its
    ``execute_tool`` span while tracing is on."""
    current = tracer
    if current is None:
        return call()
    with current.tool(name, reversibility, False, None, saga_id=intent.saga_id) as span:
        span.journaled(intent)
        return call()


async def resumed_async(
    name: str, reversibility: str, intent: JournalEntry, call: Callable[[], Awaitable[T]]
) -> T:
    """:func:`resumed` for asyncio."""
    current = tracer
    if current is None:
        return await call()
    with current.tool(name, reversibility, False, None, saga_id=intent.saga_id) as span:
        span.journaled(intent)
        return await call()


def undo_invoker(invoke: Callable[[CompensationCall], T]) -> Callable[[CompensationCall], T]:
    """``invoke`` making each undo inside its span while tracing is on."""

    def traced(call: CompensationCall) -> T:
        current = tracer
        if current is None:
            return invoke(call)
        with current.undo(call):
            return invoke(call)

    return traced


def undo_invoker_async(
    invoke: Callable[[CompensationCall], Awaitable[T]],
) -> Callable[[CompensationCall], Awaitable[T]]:
    """:func:`undo_invoker` for the asyncio runner."""

    async def traced(call: CompensationCall) -> T:
        current = tracer
        if current is None:
            return await invoke(call)
        with current.undo(call):
            return await invoke(call)

    return traced


def header_traceparent(headers: object) -> str | None:
    """The well-formed ``traceparent`` among a Kafka message's ``headers`` (a list of pairs
    or a mapping, as clients give them), if any."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    if not isinstance(items, Iterable):
        return None
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2 or item[0] != "traceparent":
            continue
        value = item[1]
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        return valid_traceparent(value) if isinstance(value, str) else None
    return None


def event_traceparent(journal: object, saga_id: str, seq: int) -> str | None:
    """The ``traceparent`` the journal's event ``saga_id``/``seq`` was written with, where the
    journal keeps one (the Kafka journal's headers); ``None`` otherwise, or when it cannot be
    read (a span then starts a trace of its own: tracing never fails a decision)."""
    from sagacity.errors import SagacityError

    lookup = getattr(journal, "traceparent_of", None)
    if lookup is None:
        return None
    try:
        found = lookup(saga_id, seq)
    except SagacityError as exc:
        log.debug("no trace context for %s/%s: %s", saga_id, seq, exc)
        return None
    return found if isinstance(found, str) else None


def decision(
    kind: str, saga_id: str, seq: int, tool: str, journal: object
) -> contextlib.AbstractContextManager[Span]:
    """The span of a decision on the request ``saga_id``/``seq`` (``kind``: approve, reject,
    resume), continuing the trace of the request's event; a no-op while tracing is off."""
    current = tracer
    if current is None:
        return contextlib.nullcontext(NOOP)
    attributes: dict[str, str | int | bool] = {SAGA_ID: saga_id, SEQ: seq, TOOL: tool}
    parent = event_traceparent(journal, saga_id, seq)
    return current.span(f"{kind} {tool}", attributes=attributes, parent=parent)


def message_traceparents(messages: Iterable[Any], limit: int = MAX_LINKS) -> list[str]:
    """The distinct ``traceparent`` headers of Kafka ``messages`` (at most ``limit``); empty
    while tracing is off (the headers are not even looked at)."""
    if tracer is None:
        return []
    found: dict[str, None] = {}
    for message in messages:
        traceparent = header_traceparent(message.headers())
        if traceparent is not None:
            found[traceparent] = None
            if len(found) >= limit:
                break
    return list(found)


def _w3c(context: Any) -> str | None:
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _span_context(trace: Any, traceparent: str | None) -> Any:
    value = valid_traceparent(traceparent)
    if value is None:
        return None
    _version, trace_id, span_id, flags = value.split("-")
    return trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )
