"""``sagacity.adapters.openai_agents.journaled``: every tool of an Agents SDK agent.

Driven by the SDK's own ``agents.testing.ScriptedModel`` (streaming included); the MCP server
is an in-process implementation of the SDK's ``MCPServer`` interface listing ``mcp.types.Tool``
objects with their annotations.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.mcp import MCPServer
from agents.testing import ScriptedModel, assistant_message, function_call
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as McpTool

from sagacity import CompensationContext, Sagacity, SagaStatus
from sagacity.adapters.openai_agents import journaled
from sagacity.errors import DeclarationError
from sagacity.policy import Policy

from . import shop
from .conftest import KafkaLane
from .shop import SHOP, E, kinds

NO_TRACING = RunConfig(tracing_disabled=True)
UNDONE: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_shop() -> Iterator[None]:
    SHOP.reset()
    UNDONE.clear()
    yield
    SHOP.reset()


def unhold(context: CompensationContext) -> None:
    UNDONE.append(f"unhold {context.arguments['sku']}")


class Catalogue(MCPServer):
    """An MCP server in process: a read-only tool and a destructive one, by annotations."""

    def __init__(self) -> None:
        super().__init__()
        self.called: list[str] = []

    @property
    def name(self) -> str:
        return "catalogue"

    async def connect(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[McpTool]:
        schema = {"type": "object", "properties": {"sku": {"type": "string"}}}
        return [
            McpTool(
                name="lookup_price",
                inputSchema=schema,
                annotations=ToolAnnotations(readOnlyHint=True),
            ),
            McpTool(
                name="delist",
                inputSchema=schema,
                annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True),
            ),
        ]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None
    ) -> CallToolResult:
        self.called.append(tool_name)
        return CallToolResult(content=[TextContent(type="text", text='{"price": 3}')])

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


def hold(sku: str, quantity: int) -> str:
    """Hold units (declared by the policy)."""
    SHOP.calls.append("hold")
    return f"held {quantity} {sku}"


POLICY = Policy({"hold": {"by": f"{__name__}:unhold"}})


CALL_IDS = itertools.count()


def call(name: str, **arguments: Any) -> Any:
    return function_call(name, arguments, call_id=f"call-{name}-{next(CALL_IDS)}")


def build(model: ScriptedModel, catalogue: Catalogue | None = None) -> Agent[Any]:
    """A tool every way the SDK allows: @function_tool (decorated or by policy), an agent as
    a tool, an MCP server."""
    helper = Agent(name="helper", model=ScriptedModel([[assistant_message("helped")]]))
    return Agent(
        name="shop",
        model=model,
        tools=[
            function_tool(shop.reserve_inventory),
            function_tool(hold),
            function_tool(shop.send_confirmation),
            helper.as_tool(tool_name="ask_helper", tool_description="Ask the helper."),
        ],
        mcp_servers=[catalogue or Catalogue()],
    )


HELPER_POLICY = Policy({"hold": {"by": f"{__name__}:unhold"}, "ask_*": "READ"})


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            [
                call("reserve_inventory", sku="widget", quantity=2),
                call("hold", sku="w", quantity=1),
            ],
            [call("lookup_price", sku="widget"), call("ask_helper", input="hi")],
            [assistant_message("Done.")],
        ]
    )


EVERY_TOOL = ["reserve_inventory", "hold", "lookup_price", "ask_helper"]


@pytest.mark.kafka
def test_every_tool_and_mcp_server_of_the_agent_is_journaled_on_the_topic(
    kafka: KafkaLane,
) -> None:
    catalogue = Catalogue()
    agent = journaled(build(script(), catalogue), kafka.sagacity, policy=HELPER_POLICY)

    result = Runner.run_sync(agent, "order", run_config=NO_TRACING)

    assert result.final_output == "Done."
    assert agent.last_saga is not None
    assert agent.last_saga.status is SagaStatus.COMPLETED
    counts = kafka.counts()
    for name in EVERY_TOOL:
        assert counts[(E.INTENT, name)] == 1, name
        assert counts[(E.EXECUTED, name)] == 1, name
    assert counts[(E.SAGA_OPENED, None)] == counts[(E.SAGA_ENDED, None)] == 1
    assert catalogue.called == ["lookup_price"]


@pytest.mark.kafka
def test_run_streamed_journals_the_same_chain_as_run(kafka: KafkaLane) -> None:
    def chain(agent: Any) -> list[tuple[str, str | None]]:
        return sorted(kinds(kafka.sagacity.entries(agent.last_saga.saga_id)))

    # asyncio.run for both: Runner.run_sync keeps a loop a later asyncio.run would orphan.
    plain = journaled(build(script()), Sagacity(kafka.journal), policy=HELPER_POLICY)
    asyncio.run(Runner.run(plain, "order", run_config=NO_TRACING))
    SHOP.reset()

    async def streamed() -> Any:
        agent = journaled(build(script()), Sagacity(kafka.journal), policy=HELPER_POLICY)
        run = Runner.run_streamed(agent, "order", run_config=NO_TRACING)
        async for _ in run.stream_events():
            pass
        return agent

    assert chain(plain) == chain(asyncio.run(streamed()))
    assert (E.EXECUTED, "lookup_price") in chain(plain)


def test_an_uncovered_tool_is_refused_at_wrap_time_by_name() -> None:
    with pytest.raises(DeclarationError, match=r"'ask_helper', 'hold'"):
        journaled(build(script()), Sagacity(), policy=Policy({}))


def test_a_failure_the_sdk_hands_to_the_model_compensates_and_the_model_is_told() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = RuntimeError("payment declined")
    model = ScriptedModel(
        [
            [call("hold", sku="widget", quantity=2)],
            [call("create_order", sku="widget", quantity=2)],
            [call("hold", sku="widget", quantity=1)],
            [assistant_message("Sorry.")],
        ]
    )
    agent = journaled(
        Agent(
            name="shop",
            model=model,
            tools=[function_tool(hold), function_tool(shop.create_order)],
        ),
        sagacity,
        policy=POLICY,
        saga_id=lambda: "oa-told",
    )

    result = Runner.run_sync(agent, "order", run_config=NO_TRACING)

    assert result.final_output == "Sorry."
    assert agent.last_saga is not None
    assert agent.last_saga.status is SagaStatus.COMPENSATED
    assert UNDONE == ["unhold widget"]
    outputs = [
        str(item["output"])
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert outputs[1].endswith(
        "\n[FAILED] Tool 'create_order' failed (RuntimeError: payment declined); unless a "
        "retry of it succeeds, saga oa-told is rolled back when it ends, undoing: hold. Do not "
        "report success."
    )
    assert outputs[2] == (
        "[SAGA_FAILED] Tool 'hold' was not called: saga oa-told has a failed step "
        "('create_order') and is rolled back unless a retry of it succeeds. Do not report "
        "success."
    )
    assert kinds(sagacity.entries("oa-told")).count((E.EXECUTED, "hold")) == 1


def test_mcp_annotations_gate_a_destructive_tool_and_the_model_is_told() -> None:
    sagacity = Sagacity()
    model = ScriptedModel([[call("delist", sku="widget")], [assistant_message("Waiting.")]])
    catalogue = Catalogue()
    agent = journaled(
        Agent(name="shop", model=model, mcp_servers=[catalogue]),
        sagacity,
        saga_id=lambda: "oa-gate",
    )

    Runner.run_sync(agent, "delist", run_config=NO_TRACING)

    assert agent.last_saga is not None
    assert agent.last_saga.status is SagaStatus.AWAITING_APPROVAL
    [request] = sagacity.pending_approvals("oa-gate")
    outputs = [
        str(item["output"])
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert (
        "[AWAITING_APPROVAL] Tool 'delist' requires human approval; it has not run "
        f"(saga oa-gate, request {request.seq})."
    ) in outputs[0]
    assert catalogue.called == []

    sagacity.approve("oa-gate", request.seq, "alice")
    assert sagacity.resume_saga("oa-gate", request.seq, request.payload).status is (
        SagaStatus.COMPLETED
    )
    assert catalogue.called == ["delist"]


def test_a_hosted_tool_is_refused_naming_it() -> None:
    from agents import WebSearchTool

    with pytest.raises(DeclarationError, match="WebSearchTool"):
        journaled(Agent(name="a", tools=[WebSearchTool()]), Sagacity())


def test_the_same_agent_journaled_twice_by_one_sagacity_runs_both() -> None:
    sagacity = Sagacity()
    catalogue = Catalogue()
    for _ in range(2):
        model = ScriptedModel([[call("lookup_price", sku="w")], [assistant_message("ok")]])
        agent = journaled(Agent(name="a", model=model, mcp_servers=[catalogue]), sagacity)
        Runner.run_sync(agent, "price", run_config=NO_TRACING)
        assert agent.last_saga is not None
        assert agent.last_saga.status is SagaStatus.COMPLETED
    assert catalogue.called == ["lookup_price", "lookup_price"]
