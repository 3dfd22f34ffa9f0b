"""Each framework's id of a tool call is its span's ``gen_ai.tool.call.id``
(docs/operations/tracing.md), so a trace joins the framework's own record of the call."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sagacity import Sagacity
from tests.integrations.test_tracing import exporter

from . import test_langchain_middleware as lc
from . import test_openai_agents_agent as oa
from . import test_pydantic_ai_agent as pa

_ = exporter  # the fixture: spans kept in memory while tracing is on


def call_ids(memory: InMemorySpanExporter) -> dict[Any, Any]:
    """Each tool's call id, from its ``execute_tool`` spans."""
    ids: dict[Any, Any] = {}
    for span in memory.get_finished_spans():
        if span.name.startswith("execute_tool "):
            attributes = span.attributes or {}
            ids[attributes.get("gen_ai.tool.name")] = attributes.get("gen_ai.tool.call.id")
    return ids


def test_pydantic_ai_calls_carry_the_models_call_ids(exporter: InMemorySpanExporter) -> None:
    from sagacity.adapters.pydantic_ai import journaled

    agent = journaled(pa.build(pa.Script(*pa.TURNS), pa.Inventory()), Sagacity(), policy=pa.POLICY)
    assert agent.run_sync("go").output == "Done."
    ids = call_ids(exporter)
    assert ids["check_stock"] == "call-check_stock-0"
    assert ids["reserve"] == "call-reserve-0"
    assert ids["create_order"] == "call-create_order-1"  # an MCP-annotated toolset's neighbour


def test_langchain_calls_carry_the_models_call_ids(exporter: InMemorySpanExporter) -> None:
    state = lc.agent(Sagacity(), *lc.TURNS).invoke({"messages": [("user", "order")]})
    assert state["messages"][-1].content == "Done."
    ids = call_ids(exporter)
    assert ids["check_stock"] == "call-check_stock-0"
    assert ids["hold"] == "call-hold-0"
    assert ids["create_order"] == "call-create_order-0"


def test_openai_agents_calls_carry_the_models_call_ids(exporter: InMemorySpanExporter) -> None:
    from agents import Runner

    from sagacity.adapters.openai_agents import journaled

    agent = journaled(oa.build(oa.script()), Sagacity(), policy=oa.HELPER_POLICY)
    Runner.run_sync(agent, "order", run_config=oa.NO_TRACING)
    ids = call_ids(exporter)
    assert str(ids["reserve_inventory"]).startswith("call-reserve_inventory-")
    assert str(ids["hold"]).startswith("call-hold-")
    assert str(ids["lookup_price"]).startswith("call-lookup_price-")  # an MCP server's tool
