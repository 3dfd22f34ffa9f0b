"""OpenAI Agents SDK tools through ``sagacity.adapters.openai_agents``, with a scripted model.

The model implements the SDK's ``Model`` interface and replays fixed turns; tracing is off for
every run.  No network, no API key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import pytest
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    RunConfig,
    RunContextWrapper,
    Runner,
    Usage,
    function_tool,
)
from mcp.types import TextContent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from sagacity import InMemoryJournal, Reversibility, Sagacity, SagaStatus, compensable
from sagacity.adapters.openai_agents import stop_at_approval, wrap_tool, wrap_tools
from sagacity.errors import DeclarationError

from . import shop
from .shop import SHOP, E, kinds

AWAITING = "[AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval"
NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture(autouse=True)
def _fresh_shop() -> Iterator[None]:
    SHOP.reset()
    yield
    SHOP.reset()


class ScriptedModel(Model):
    """One scripted response per turn; records every tool output the model is sent."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any]]] | str) -> None:
        self.turns = list(turns)
        self.seen: list[str] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        if isinstance(input, list):
            self.seen = [
                str(item["output"])
                for item in input
                if isinstance(item, dict) and item.get("type") == "function_call_output"
            ]
        turn = self.turns.pop(0)
        output: list[Any]
        if isinstance(turn, str):
            output = [
                ResponseOutputMessage(
                    id="msg",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=turn, annotations=[])],
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    id=f"fc-{name}-{i}",
                    call_id=f"call-{name}-{i}",
                    type="function_call",
                    name=name,
                    arguments=json.dumps(args),
                )
                for i, (name, args) in enumerate(turn)
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def shop_agent(
    sagacity: Sagacity, model: ScriptedModel, tools: list[Any] | None = None, **options: Any
) -> Agent[Any]:
    if tools is None:
        tools = [
            shop.check_stock,
            shop.reserve_inventory,
            shop.create_order,
            shop.send_confirmation,
        ]
    return Agent(name="shop", model=model, tools=wrap_tools(sagacity, tools), **options)


RESERVE = ("reserve_inventory", {"sku": "widget", "quantity": 2})
ORDER = ("create_order", {"sku": "widget", "quantity": 2})
CONFIRM = ("send_confirmation", {"order_id": "order-1", "email": "a@example.com"})


def test_a_failure_the_sdk_hands_to_the_model_still_compensates() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = RuntimeError("payment declined")
    model = ScriptedModel([RESERVE], [ORDER], "Sorry, the payment was declined.")
    agent = shop_agent(sagacity, model)

    result = sagacity.saga(
        "s-1", lambda: Runner.run_sync(agent, "order two widgets", run_config=NO_TRACING)
    )

    # The SDK's failure_error_function gave the model the error and the run carried on.
    assert result.value.final_output == "Sorry, the payment was declined."
    assert "An error occurred while running the tool. Please try again." in model.seen
    assert result.status is SagaStatus.COMPENSATED
    assert SHOP.stock == {"widget": 10}
    assert SHOP.calls == ["reserve_inventory", "create_order", "release_inventory"]
    entries = sagacity.entries("s-1")
    assert kinds(entries) == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
        (E.INTENT, "create_order"),
        (E.FAILED, "create_order"),
        (E.COMPENSATION_INTENT, "reserve_inventory"),
        (E.COMPENSATED, "reserve_inventory"),
        (E.SAGA_ENDED, None),
    ]
    assert entries[1].payload == '{"sku":"widget","quantity":2}'
    assert entries[4].error == "RuntimeError: payment declined"


def test_the_gate_returns_awaiting_to_the_model_and_resume_runs_the_exact_payload() -> None:
    sagacity = Sagacity()
    model = ScriptedModel([RESERVE], [ORDER], [CONFIRM], "Your order waits for approval.")
    agent = shop_agent(sagacity, model)

    result = sagacity.saga(
        "s-gate", lambda: Runner.run_sync(agent, "order and confirm", run_config=NO_TRACING)
    )

    assert AWAITING in model.seen
    assert result.value.final_output == "Your order waits for approval."
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert SHOP.sent == []
    [request] = sagacity.pending_approvals("s-gate")
    assert request.payload == '{"order_id":"order-1","email":"a@example.com"}'

    sagacity.approve("s-gate", request.seq, "alice")
    resumed = sagacity.resume_saga("s-gate", request.seq, request.payload)

    assert resumed.status is SagaStatus.COMPLETED
    assert SHOP.sent == [("order-1", "a@example.com")]
    assert kinds(sagacity.entries("s-gate"))[-3:] == [
        (E.INTENT, "send_confirmation"),
        (E.EXECUTED, "send_confirmation"),
        (E.SAGA_ENDED, None),
    ]


def test_stop_at_approval_ends_the_run_with_the_awaiting_text() -> None:
    sagacity = Sagacity()
    # No final turn: the model is not asked again after the gate.
    model = ScriptedModel([RESERVE], [ORDER], [CONFIRM])
    agent = shop_agent(sagacity, model, tool_use_behavior=stop_at_approval)

    result = sagacity.saga("s-stop", lambda: Runner.run_sync(agent, "go", run_config=NO_TRACING))

    assert result.value.final_output == AWAITING
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert model.turns == []


def test_sync_and_async_tools_are_journaled_in_an_async_run() -> None:
    sagacity = Sagacity()
    model = ScriptedModel([("check_stock", {"sku": "widget"})], [RESERVE], [ORDER], "Done.")
    agent = shop_agent(sagacity, model)

    async def work() -> Any:
        return await Runner.run(agent, "order", run_config=NO_TRACING)

    result = asyncio.run(sagacity.saga_async("s-async", work))

    assert result.status is SagaStatus.COMPLETED
    executed = [e for e in sagacity.entries("s-async") if e.event_type is E.EXECUTED]
    assert [(e.tool, e.result) for e in executed] == [
        ("check_stock", "10"),
        ("reserve_inventory", '{"sku":"widget","quantity":2}'),
        ("create_order", "order-1"),
    ]


def test_the_wrapped_tool_keeps_the_original_options_and_drops_the_context() -> None:
    sagacity = Sagacity()

    @compensable(reversibility=Reversibility.READ)
    def whoami(ctx: RunContextWrapper[str], greeting: str) -> str:
        """Greet the current user."""
        return f"{greeting} {ctx.context}"

    original = function_tool(
        whoami, name_override="greet", failure_error_function=lambda _c, e: f"nope: {e}"
    )
    [wrapped] = wrap_tools(sagacity, [original])
    assert isinstance(wrapped, FunctionTool)
    assert (wrapped.name, wrapped.description) == ("greet", original.description)
    assert wrapped.params_json_schema == original.params_json_schema
    model = ScriptedModel([("greet", {"greeting": "hi"})], "done")
    agent = Agent(name="a", model=model, tools=[wrapped])

    result = sagacity.saga(
        "s-ctx", lambda: Runner.run_sync(agent, "who", context="bob", run_config=NO_TRACING)
    )

    assert result.status is SagaStatus.COMPLETED
    intent, executed = sagacity.entries("s-ctx")[1:3]
    assert (intent.tool, intent.payload) == ("whoami", '{"greeting":"hi"}')
    assert executed.result == "hi bob"


def test_options_declare_an_undecorated_tool_and_outside_a_saga_nothing_is_journaled() -> None:
    journal = InMemoryJournal()
    sagacity = Sagacity(journal)

    def ping(host: str) -> str:
        """Ping a host."""
        return f"pong {host}"

    tool = wrap_tool(sagacity, ping, reversibility=Reversibility.READ)
    model = ScriptedModel([("ping", {"host": "db"})], "ok")
    out = Runner.run_sync(Agent(name="a", model=model, tools=[tool]), "x", run_config=NO_TRACING)
    assert out.final_output == "ok"
    assert model.seen == ["pong db"]
    assert journal.saga_ids() == ()


def undeclared(x: int) -> int:
    """Echo."""
    return x


@compensable(by="no_such_compensation")
def dangling(x: int) -> int:
    """Echo."""
    return x


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def needs_context(ctx: RunContextWrapper[Any], x: int) -> int:
    """Echo."""
    return x


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        (undeclared, {}, "has no declaration"),
        (dangling, {}, "by='no_such_compensation' names no function"),
        (shop.reserve_inventory, {"reversibility": Reversibility.READ}, "declared twice"),
        (undeclared, {"reversibility": Reversibility.PRIVILEGED, "by": "x"}, "cannot declare"),
        (needs_context, {}, "resumed outside the agent run"),
        ("not a tool", {}, "expected a FunctionTool"),
    ],
)
def test_a_wrong_declaration_fails_at_wrap_time(
    target: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError, match=message):
        wrap_tool(Sagacity(), target, **options)


def test_a_hand_made_function_tool_is_refused() -> None:
    async def invoke(ctx: Any, arguments: str) -> str:
        return arguments

    hand_made = FunctionTool(
        name="raw", description="raw", params_json_schema={}, on_invoke_tool=invoke
    )
    with pytest.raises(DeclarationError, match="not made by @function_tool"):
        wrap_tool(Sagacity(), hand_made, reversibility=Reversibility.READ)


class _SnakeResult:
    """An MCP SDK 2.x tool result in a process that also loaded FastMCP: reading the old
    camelCase names warns (an error here)."""

    is_error = False
    structured_content = None
    content: ClassVar[list[Any]] = [TextContent(type="text", text='{"price": 3}')]

    @property
    def isError(self) -> bool:
        raise AssertionError("read the deprecated isError")

    @property
    def structuredContent(self) -> Any:
        raise AssertionError("read the deprecated structuredContent")


class _CamelResult:
    """An MCP SDK 1.x tool result: camelCase names only."""

    isError = True  # noqa: N815 - the SDK 1.x name
    structuredContent: ClassVar[dict[str, int]] = {"price": 4}  # noqa: N815 - the SDK 1.x name
    content: ClassVar[list[Any]] = []


def test_an_mcp_result_is_read_by_the_names_its_sdk_has() -> None:
    from sagacity.adapters.openai_agents import _is_error, _mcp_value

    assert _is_error(_SnakeResult()) is False  # type: ignore[arg-type]
    assert _mcp_value(_SnakeResult()) == {"price": 3}  # type: ignore[arg-type]
    assert _is_error(_CamelResult()) is True  # type: ignore[arg-type]
    assert _mcp_value(_CamelResult()) == {"price": 4}  # type: ignore[arg-type]
