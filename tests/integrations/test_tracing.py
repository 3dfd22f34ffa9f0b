"""Spans in one process, with the OpenTelemetry SDK's in-memory exporter.

The spans of a saga, its tool calls, its gate and its undos; their attributes name things and
never carry a payload value (a redacted field least of all); and, with tracing off, nothing of
OpenTelemetry is imported.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from sagacity import InMemoryJournal, Sagacity
from sagacity.telemetry import _tracing
from sagacity.telemetry._traceparent import current_traceparent
from tests.integrations.travel_tools import Travel

SECRET = "Ada Lovelace"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _tracing.enable(provider)
    try:
        yield memory
    finally:
        _tracing.disable()
        provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def values(span: ReadableSpan) -> list[Any]:
    return list((span.attributes or {}).values())


def test_a_saga_its_calls_and_its_gate_are_one_trace(exporter: InMemorySpanExporter) -> None:
    sagacity = Sagacity(journal=InMemoryJournal())
    tools = sagacity.wrap(Travel())

    def work() -> None:
        tools.book("Oslo", SECRET)
        tools.pay(2500)

    result = sagacity.saga("trip-1", work)
    assert result.status.value == "AWAITING_APPROVAL"
    spans = by_name(exporter.get_finished_spans())
    saga, book, pay = spans["saga"], spans["execute_tool book"], spans["execute_tool pay"]
    gate = spans["request_approval pay"]
    assert {s.context.trace_id for s in spans.values()} == {saga.context.trace_id}
    assert saga.parent is None
    assert book.parent is not None
    assert book.parent.span_id == saga.context.span_id
    assert pay.parent is not None
    assert pay.parent.span_id == saga.context.span_id
    assert gate.parent is not None
    assert gate.parent.span_id == pay.context.span_id
    assert saga.attributes == {
        "sagacity.saga.id": "trip-1",
        "sagacity.outcome": "AWAITING_APPROVAL",
    }
    assert book.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "book",
        "gen_ai.tool.type": "function",
        "sagacity.tool.reversibility": "COMPENSATABLE",
        "sagacity.saga.id": "trip-1",
        "sagacity.seq": 2,
        "sagacity.outcome": "executed",
    }
    assert pay.attributes is not None
    assert gate.attributes is not None
    assert pay.attributes["sagacity.outcome"] == "awaiting_approval"
    assert gate.attributes["sagacity.seq"] == pay.attributes["sagacity.seq"] == 4
    assert gate.attributes["sagacity.outcome"] == "awaiting_approval"
    for span in spans.values():
        flat = " ".join(str(v) for v in values(span))
        assert SECRET not in flat
        assert "Oslo" not in flat
        assert "2500" not in flat


def test_a_failed_call_names_its_error_type_only_and_its_undo_is_a_span(
    exporter: InMemorySpanExporter,
) -> None:
    sagacity = Sagacity(journal=InMemoryJournal())
    tools = sagacity.wrap(Travel())

    def work() -> None:
        tools.book("Oslo", SECRET)
        tools.lose(SECRET)

    result = sagacity.saga("trip-2", work)
    assert result.status.value == "COMPENSATED"
    spans = by_name(exporter.get_finished_spans())
    lost, undo, saga = spans["execute_tool lose"], spans["undo book"], spans["saga"]
    assert lost.status.status_code is StatusCode.ERROR
    assert lost.status.description is None
    assert lost.attributes is not None
    assert lost.attributes["error.type"] == "RuntimeError"
    assert lost.attributes["sagacity.outcome"] == "failed"
    assert not lost.events  # no exception event: its message could carry a payload value
    assert undo.parent is not None
    assert undo.parent.span_id == saga.context.span_id
    assert undo.attributes == {
        "sagacity.saga.id": "trip-2",
        "sagacity.seq": 3,  # the EXECUTED undone
        "gen_ai.tool.name": "book",
        "sagacity.undo.target": "cancel",
        "sagacity.outcome": "compensated",
    }
    assert saga.attributes is not None
    assert saga.attributes["sagacity.outcome"] == "COMPENSATED"
    for span in spans.values():
        assert SECRET not in " ".join(str(v) for v in values(span))


def test_events_journaled_in_a_span_carry_its_traceparent(
    exporter: InMemorySpanExporter,
) -> None:
    seen: list[str | None] = []

    class Recording(InMemoryJournal):
        def append(self, draft: Any, *, durable: bool = True) -> Any:
            seen.append(current_traceparent.get())
            return super().append(draft, durable=durable)

    sagacity = Sagacity(journal=Recording())
    tools = sagacity.wrap(Travel())
    sagacity.saga("trip-3", lambda: tools.book("Oslo", SECRET))
    spans = by_name(exporter.get_finished_spans())
    saga, book = spans["saga"], spans["execute_tool book"]

    def header(span: ReadableSpan) -> str:
        ctx = span.context
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    # SAGA_OPENED, INTENT, EXECUTED, SAGA_ENDED
    assert seen == [header(saga), header(book), header(book), header(saga)]
    assert current_traceparent.get() is None


def test_an_open_run_is_a_span_and_its_calls_are_its_children(
    exporter: InMemorySpanExporter,
) -> None:
    sagacity = Sagacity(journal=InMemoryJournal())
    tools = sagacity.wrap(Travel())
    run = sagacity.open_run("conversation-1")
    run.call(lambda: tools.book("Oslo", SECRET))
    with _tracing.calling_tool("call_42"):
        run.call(lambda: tools.book("Bergen", SECRET))
    run.end()
    spans = exporter.get_finished_spans()
    saga = next(s for s in spans if s.name == "saga")
    calls = [s for s in spans if s.name == "execute_tool book"]
    assert len(calls) == 2
    assert all(c.parent is not None and c.parent.span_id == saga.context.span_id for c in calls)
    assert [(c.attributes or {}).get("gen_ai.tool.call.id") for c in calls] == [None, "call_42"]
    assert saga.attributes is not None
    assert saga.attributes["sagacity.outcome"] == "COMPLETED"


def test_without_tracing_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys\n"
        "from sagacity import InMemoryJournal, Sagacity\n"
        "from tests.integrations.travel_tools import Travel\n"
        "s = Sagacity(journal=InMemoryJournal())\n"
        "t = s.wrap(Travel())\n"
        "s.saga('x', lambda: (t.book('Oslo', 'Ada'), t.pay(1)))\n"
        "s.compensate('x')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_configure_from_env_stays_off_unless_traces_are_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert _tracing.configure_from_env("test") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert _tracing.configure_from_env("test") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert _tracing.configure_from_env("test") is False
    assert _tracing.tracer is None


def test_the_shared_no_op_span_keeps_nothing() -> None:
    assert _tracing.tracer is None
    with _tracing.span("anything") as span:
        span.outcome = "set while off"
    assert span is _tracing.NOOP
    assert _tracing.NOOP.outcome is None


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [("traceparent", b"not-a-traceparent")],
        [("traceparent", b"00-" + b"0" * 32 + b"-" + b"1" * 16 + b"-01")],  # all-zero trace id
        {"traceparent": 42},
    ],
)
def test_a_malformed_traceparent_header_is_ignored(headers: object) -> None:
    assert _tracing.header_traceparent(headers) is None
