"""``sagacity.adapters.pydantic_ai.journaled``: every tool of an agent, however registered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from sagacity import CompensationContext, Reversibility, Sagacity, SagaStatus
from sagacity.adapters import ModelLines
from sagacity.adapters.pydantic_ai import journaled
from sagacity.errors import DeclarationError, PolicyError
from sagacity.policy import Policy, PolicyWarning
from tests._loops import close_default_event_loop

from . import shop
from .conftest import KafkaLane
from .shop import SHOP, E, kinds

UNDONE: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_shop() -> Iterator[None]:
    SHOP.reset()
    UNDONE.clear()
    yield
    SHOP.reset()


def unreserve(context: CompensationContext) -> None:
    UNDONE.append(f"unreserve {context.arguments['sku']}")


class Script:
    """A scripted model: one response per turn; records every tool result it is sent."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any]]] | str) -> None:
        self.turns = list(turns)
        self.seen: list[tuple[str, str]] = []

    def _record(self, messages: list[ModelMessage]) -> Any:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                tool = getattr(part, "tool_name", None)
                if tool is not None:
                    self.seen.append((tool, str(part.content)))
        return self.turns.pop(0)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = self._record(messages)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[
                ToolCallPart(tool_name=name, args=args, tool_call_id=f"call-{name}-{i}")
                for i, (name, args) in enumerate(turn)
            ]
        )

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> Any:
        turn = self._record(messages)
        if isinstance(turn, str):
            yield turn
            return
        yield {
            i: DeltaToolCall(name=name, json_args=_json(args), tool_call_id=f"call-{name}-{i}")
            for i, (name, args) in enumerate(turn)
        }


def _json(args: dict[str, Any]) -> str:
    import json

    return json.dumps(args)


class Inventory(AbstractToolset[Any]):
    """A toolset of remote tools listed with MCP annotations, as an MCP server's are."""

    TOOLS: ClassVar[dict[str, dict[str, bool] | None]] = {
        "lookup_price": {"readOnlyHint": True},
        "purge_cache": {"readOnlyHint": False, "destructiveHint": True},
    }

    def __init__(self) -> None:
        self.called: list[str] = []

    @property
    def id(self) -> str | None:
        return "inventory"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        schema = {"type": "object", "properties": {"sku": {"type": "string"}}}
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=name,
                    parameters_json_schema=schema,
                    metadata={"annotations": annotations},
                ),
                max_retries=1,
                args_validator=SchemaValidator(core_schema.dict_schema()),
            )
            for name, annotations in self.TOOLS.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        self.called.append(name)
        return {"sku": tool_args["sku"], "price": 3}


def ping_host(host: str) -> str:
    """Ping a host."""
    return f"pong {host}"


def search_orders(text: str) -> list[str]:
    """Search orders."""
    return [text]


def build(script: Script, inventory: Inventory | None = None) -> Agent[None, str]:
    """An agent with a tool registered in every way Pydantic AI allows."""
    extra = FunctionToolset([Tool(search_orders)])
    toolsets: list[AbstractToolset[Any]] = [extra]
    if inventory is not None:
        toolsets.append(inventory)
    agent = Agent(
        FunctionModel(script, stream_function=script.stream),
        tools=[shop.check_stock, shop.create_order],
        toolsets=toolsets,
    )

    @agent.tool_plain
    def reserve(sku: str, quantity: int) -> str:
        """Reserve units (declared by the policy, undone by a module:function)."""
        SHOP.calls.append("reserve")
        return f"reserved {quantity} {sku}"

    @agent.tool
    def whoami(ctx: RunContext[None], greeting: str) -> str:
        """Say hello."""
        return greeting

    return agent


POLICY = Policy(
    {
        "reserve": {"by": f"{__name__}:unreserve"},
        "search_*": "READ",
        "whoami": "READ",
    }
)
TURNS: list[Any] = [
    [("check_stock", {"sku": "widget"}), ("search_orders", {"text": "w"})],
    [("reserve", {"sku": "widget", "quantity": 2}), ("whoami", {"greeting": "hi"})],
    [("lookup_price", {"sku": "widget"}), ("create_order", {"sku": "widget", "quantity": 2})],
    "Done.",
]
EVERY_TOOL = ["check_stock", "search_orders", "reserve", "whoami", "lookup_price", "create_order"]


@pytest.mark.kafka
def test_every_way_of_registering_a_tool_is_journaled_on_the_topic(kafka: KafkaLane) -> None:
    inventory = Inventory()
    agent = journaled(build(Script(*TURNS), inventory), kafka.sagacity, policy=POLICY)

    result = agent.run_sync("order")

    assert result.output == "Done."
    saga = agent.last_saga
    assert saga is not None
    assert saga.status is SagaStatus.COMPLETED
    counts = kafka.counts()
    for tool in EVERY_TOOL:
        assert counts[(E.INTENT, tool)] == 1, tool
        assert counts[(E.EXECUTED, tool)] == 1, tool
    assert counts[(E.SAGA_OPENED, None)] == 1
    assert counts[(E.SAGA_ENDED, None)] == 1
    assert inventory.called == ["lookup_price"]


@pytest.mark.kafka
def test_streaming_and_iter_runs_journal_the_same_chain_as_run(kafka: KafkaLane) -> None:
    chains = []

    def chain(saga_id: str) -> list[tuple[str, str | None]]:
        return sorted(kinds(kafka.sagacity.entries(saga_id)))

    def fresh() -> Sagacity:  # each agent's closures are different tools: one Sagacity each
        return Sagacity(kafka.journal)

    plain = journaled(build(Script(*TURNS), Inventory()), fresh(), policy=POLICY)
    plain.run_sync("order")
    close_default_event_loop()  # run_sync's loop, before asyncio.run below replaces it
    assert plain.last_saga is not None
    chains.append(chain(plain.last_saga.saga_id))

    async def streamed() -> str:
        agent = journaled(build(Script(*TURNS), Inventory()), fresh(), policy=POLICY)
        async with agent.run_stream("order") as run:
            output = await run.get_output()
        assert agent.last_saga is not None
        chains.append(chain(agent.last_saga.saga_id))
        return output

    async def iterated() -> None:
        agent = journaled(build(Script(*TURNS), Inventory()), fresh(), policy=POLICY)
        async with agent.iter("order") as run:
            async for _ in run:
                pass
        assert agent.last_saga is not None
        chains.append(chain(agent.last_saga.saga_id))

    SHOP.reset()
    assert asyncio.run(streamed()) == "Done."
    SHOP.reset()
    asyncio.run(iterated())

    assert chains[0] == chains[1] == chains[2]
    assert (E.EXECUTED, "lookup_price") in chains[0]


def test_an_uncovered_tool_is_refused_at_wrap_time_by_name() -> None:
    with pytest.raises(DeclarationError, match=r"'reserve', 'search_orders', 'whoami'"):
        journaled(build(Script("x")), Sagacity(), policy=Policy({}))


def test_an_uncovered_mcp_tool_is_refused_when_its_server_lists_it() -> None:
    # purge_cache is destructive by its annotations: IRREVERSIBLE, so covered; a server tool
    # with no annotations and no rule is not.
    class Bare(Inventory):
        TOOLS: ClassVar[dict[str, dict[str, bool] | None]] = {"drop_table": None}

    agent = journaled(build(Script("x"), Bare()), Sagacity(), policy=POLICY)
    with pytest.raises(DeclarationError, match="'drop_table'"):
        agent.run_sync("go")


def test_a_policy_default_covers_the_rest() -> None:
    agent = journaled(build(Script("ok")), Sagacity(), policy=Policy({}, default="COMPENSATABLE"))
    assert agent.run_sync("go").output == "ok"


def test_mcp_annotations_give_defaults_and_the_gate_line_reaches_the_model() -> None:
    sagacity = Sagacity()
    script = Script([("purge_cache", {"sku": "widget"})], "Waiting for approval.")
    agent = journaled(build(script, Inventory()), sagacity, policy=POLICY)

    agent.run_sync("purge")

    saga = agent.last_saga
    assert saga is not None
    assert saga.status is SagaStatus.AWAITING_APPROVAL
    [request] = sagacity.pending_approvals(saga.saga_id)
    assert script.seen == [
        (
            "purge_cache",
            "[AWAITING_APPROVAL] Tool 'purge_cache' requires human approval; it has not run "
            f"(saga {saga.saga_id}, request {request.seq}).",
        )
    ]


def test_a_refusal_handed_to_the_model_undoes_nothing_and_the_model_is_told() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = ModelRetry("payment declined")
    script = Script(
        [("reserve", {"sku": "widget", "quantity": 2})],
        [("create_order", {"sku": "widget", "quantity": 2})],
        [("check_stock", {"sku": "widget"})],
        "Sorry.",
    )
    agent = journaled(build(script), sagacity, policy=POLICY, saga_id=lambda: "s-told")

    assert agent.run_sync("order").output == "Sorry."

    saga = agent.last_saga
    assert saga is not None
    assert saga.status is SagaStatus.COMPLETED
    assert UNDONE == []
    told = dict(script.seen)
    assert (
        "payment declined\n[REFUSED] Tool 'create_order' refused the call before acting: "
        "nothing happened and nothing is undone; you may call it again with other arguments."
        in told["create_order"]
    )
    assert not told["check_stock"].startswith("[")
    failed = [e for e in sagacity.entries("s-told") if e.event_type is E.FAILED]
    assert [e.attributes.get("refused") for e in failed] == ["retry"]


def test_a_run_inside_an_explicit_saga_joins_it() -> None:
    sagacity = Sagacity()
    agent = journaled(
        build(Script([("whoami", {"greeting": "hi"})], "ok")), sagacity, policy=POLICY
    )
    result = sagacity.saga("outer", lambda: agent.run_sync("hi").output)
    assert result.value == "ok"
    assert agent.last_saga is None
    assert (E.EXECUTED, "whoami") in kinds(sagacity.entries("outer"))


def test_a_conversation_is_one_saga_across_runs_ended_explicitly() -> None:
    sagacity = Sagacity()
    script = Script(
        [("whoami", {"greeting": "hi"})], "one", [("reserve", {"sku": "w", "quantity": 1})], "two"
    )
    agent = journaled(build(script), sagacity, policy=POLICY)
    conversation = sagacity.conversation("c-1")

    conversation.call(lambda: agent.run_sync("first"))
    assert sagacity.conversation("c-1") is conversation
    conversation.call(lambda: agent.run_sync("second"))
    result = conversation.end()

    assert result.status is SagaStatus.COMPLETED
    chain = kinds(sagacity.entries("c-1"))
    assert chain.count((E.SAGA_OPENED, None)) == 1
    assert (E.EXECUTED, "whoami") in chain
    assert (E.EXECUTED, "reserve") in chain
    assert chain[-1] == (E.SAGA_ENDED, None)


def test_a_policy_naming_absent_tools_warns_listing_them() -> None:
    policy = Policy({"refund_invoice": "IRREVERSIBLE", "grant_*": "PRIVILEGED"}, default="READ")
    with pytest.warns(PolicyWarning, match=r"'refund_invoice', 'grant_\*'"):
        journaled(build(Script("x")), Sagacity(), policy=policy)


def test_an_undo_target_that_does_not_import_fails_naming_it() -> None:
    with pytest.raises(PolicyError, match=r"tool 'reserve': module 'no_such_module' does not"):
        Policy({"reserve": {"by": "no_such_module:release"}})


TICKETS = {"T-1": "pending"}


def test_a_write_that_returns_its_own_undo_is_undone_by_it() -> None:
    TICKETS["T-1"] = "pending"
    sagacity = Sagacity()
    script = Script(
        [("update_ticket_status", {"ticket_id": "T-1", "status": "closed"})],
        [("refund", {"ticket_id": "T-1"})],
        "Sorry.",
    )
    agent = Agent(FunctionModel(script))

    @agent.tool_plain
    def update_ticket_status(ticket_id: str, status: str) -> dict[str, Any]:
        """Set a ticket's status; returns the call that sets it back."""
        previous, TICKETS[ticket_id] = TICKETS[ticket_id], status
        return {
            "status": status,
            "undo": {
                "tool": "update_ticket_status",
                "arguments": {"ticket_id": ticket_id, "status": previous},
            },
        }

    @agent.tool_plain
    def refund(ticket_id: str) -> str:
        """Refund the ticket's order."""
        raise RuntimeError("the payment provider is down")

    policy = Policy.loads(
        '[tools]\nupdate_ticket_status = { undo_tools = ["update_ticket_status"] }\n'
        'refund = "REVERSIBLE"\n'
    )
    hooked = journaled(agent, sagacity, policy=policy)
    with pytest.raises(RuntimeError):
        hooked.run_sync("close T-1 and refund")

    assert hooked.last_saga is not None
    assert hooked.last_saga.status is SagaStatus.COMPENSATED
    assert TICKETS == {"T-1": "pending"}


def test_the_lines_the_model_is_told_are_configurable() -> None:
    sagacity = Sagacity()
    script = Script([("purge_cache", {"sku": "w"})], "ok")
    lines = ModelLines(gate="Held for a human: {tool} in {saga_id} (request {seq}).")
    agent = journaled(
        build(script, Inventory()), sagacity, policy=POLICY, lines=lines, saga_id=lambda: "s-l"
    )
    agent.run_sync("purge")
    [request] = sagacity.pending_approvals("s-l")
    assert script.seen == [
        ("purge_cache", f"Held for a human: purge_cache in s-l (request {request.seq}).")
    ]
    with pytest.raises(DeclarationError, match="one line"):
        ModelLines(refused="two\nlines")


def test_a_compensable_tool_keeps_its_declaration_and_may_not_be_declared_twice() -> None:
    sagacity = Sagacity()
    agent = journaled(build(Script("ok")), sagacity, policy=Policy({"*": "READ"}))
    # The glob covers the undecorated tools; create_order keeps its @compensable(by=...).
    assert agent.run_sync("go").output == "ok"
    registered = sagacity.registry.get("create_order")
    assert registered is not None
    assert registered.reversibility is Reversibility.COMPENSATABLE
    assert sagacity.registry.get("whoami").reversibility is Reversibility.READ  # type: ignore[union-attr]

    with pytest.raises(DeclarationError, match="'create_order' is declared twice"):
        journaled(
            build(Script("x")), Sagacity(), policy=Policy({"create_order": "READ"}, default="READ")
        )


def test_a_real_mcp_server_over_stdio_is_journaled_and_its_annotations_apply() -> None:
    import sys
    from pathlib import Path

    from fastmcp.client.transports import PythonStdioTransport
    from pydantic_ai.mcp import MCPToolset

    script_path = Path(__file__).with_name("mcp_catalogue.py")
    server = MCPToolset(PythonStdioTransport(script_path=script_path, python_cmd=sys.executable))
    sagacity = Sagacity()
    script = Script([("lookup_price", {"sku": "widget"})], [("delist", {"sku": "widget"})], "ok")
    agent = journaled(Agent(FunctionModel(script), toolsets=[server]), sagacity)

    agent.run_sync("price, then delist")

    saga = agent.last_saga
    assert saga is not None
    assert saga.status is SagaStatus.AWAITING_APPROVAL  # delist: destructive, no undo
    chain = kinds(sagacity.entries(saga.saga_id))
    assert (E.EXECUTED, "lookup_price") in chain
    assert (E.AWAITING_APPROVAL, "delist") in chain
    assert ("lookup_price", "widget: 3") in script.seen
