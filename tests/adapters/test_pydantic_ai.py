"""Pydantic AI tools through ``sagacity.adapters.pydantic_ai``, driven by a scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, Tool
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sagacity import InMemoryJournal, Reversibility, Sagacity, SagaStatus, compensable
from sagacity.adapters.pydantic_ai import wrap_tool, wrap_tools
from sagacity.errors import DeclarationError

from . import shop
from .shop import SHOP, E, kinds

AWAITING = "[AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval"


@pytest.fixture(autouse=True)
def _fresh_shop() -> Iterator[None]:
    SHOP.reset()
    yield
    SHOP.reset()


class Script:
    """A scripted model: one response per turn; records what each tool call returned."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any]]] | str) -> None:
        self.turns = list(turns)
        self.seen: list[tuple[str, str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                tool = getattr(part, "tool_name", None)
                if tool is not None:
                    self.seen.append((tool, str(part.content)))
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[
                ToolCallPart(tool_name=name, args=args, tool_call_id=f"call-{name}-{i}")
                for i, (name, args) in enumerate(turn)
            ]
        )


def agent(sagacity: Sagacity, script: Script, tools: list[Any] | None = None) -> Agent[None, str]:
    if tools is None:
        tools = [
            shop.check_stock,
            shop.reserve_inventory,
            shop.create_order,
            shop.send_confirmation,
        ]
    return Agent(FunctionModel(script), tools=wrap_tools(sagacity, tools))


RESERVE = ("reserve_inventory", {"sku": "widget", "quantity": 2})
ORDER = ("create_order", {"sku": "widget", "quantity": 2})
CONFIRM = ("send_confirmation", {"order_id": "order-1", "email": "a@example.com"})


@pytest.mark.parametrize(
    "error",
    [ToolFailed("payment declined"), ModelRetry("payment declined")],
    ids=["ToolFailed", "ModelRetry"],
)
def test_a_refusal_the_framework_hands_to_the_model_undoes_nothing(error: Exception) -> None:
    """Pydantic AI's signals mean "the tool refused; adapt and call again": journaled as a
    refusal (docs/adr/0026), they leave the saga's earlier steps in place."""
    sagacity = Sagacity()
    SHOP.create_order_error = error
    script = Script([RESERVE], [ORDER], "Sorry, the payment was declined.")
    runner = agent(sagacity, script)

    result = sagacity.saga("s-1", lambda: runner.run_sync("order two widgets").output)

    # Pydantic AI caught the exception, showed it to the model, and the run carried on.
    assert result.value == "Sorry, the payment was declined."
    told = [c for t, c in script.seen if t == "create_order"]
    assert told
    assert "payment declined" in told[0]
    assert "[REFUSED] Tool 'create_order' refused the call before acting" in told[0]
    assert result.status is SagaStatus.COMPLETED
    assert SHOP.stock == {"widget": 8}
    assert SHOP.calls == ["reserve_inventory", "create_order"]
    entries = sagacity.entries("s-1")
    assert kinds(entries) == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
        (E.INTENT, "create_order"),
        (E.FAILED, "create_order"),
        (E.SAGA_ENDED, None),
    ]
    assert entries[1].payload == '{"sku":"widget","quantity":2}'
    assert entries[4].error == f"{type(error).__name__}: payment declined"
    assert entries[4].attributes["refused"] == "retry"
    assert entries[-1].result == "COMPLETED"


def test_the_gate_returns_awaiting_to_the_model_and_resume_runs_the_exact_payload() -> None:
    sagacity = Sagacity()
    script = Script([RESERVE], [ORDER], [CONFIRM], "Your order waits for approval.")
    runner = agent(sagacity, script)

    result = sagacity.saga("s-gate", lambda: runner.run_sync("order and confirm").output)

    assert ("send_confirmation", AWAITING) in script.seen
    assert result.value == "Your order waits for approval."
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_tool_name == "send_confirmation"
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


def test_sync_and_async_tools_are_journaled_in_an_async_run() -> None:
    sagacity = Sagacity()
    script = Script([("check_stock", {"sku": "widget"})], [RESERVE], [ORDER], "Done.")
    runner = agent(sagacity, script)

    async def work() -> str:
        return (await runner.run("order")).output

    result = asyncio.run(sagacity.saga_async("s-async", work))

    assert result.status is SagaStatus.COMPLETED
    assert SHOP.orders == {"order-1": {"sku": "widget", "quantity": 2}}
    executed = [e for e in sagacity.entries("s-async") if e.event_type is E.EXECUTED]
    assert [(e.tool, e.result) for e in executed] == [
        ("check_stock", "10"),
        ("reserve_inventory", '{"sku":"widget","quantity":2}'),
        ("create_order", "order-1"),
    ]


def test_outside_a_saga_the_tools_run_unjournaled() -> None:
    journal = InMemoryJournal()
    sagacity = Sagacity(journal)
    runner = agent(sagacity, Script([RESERVE], "ok"))
    assert runner.run_sync("order").output == "ok"
    assert SHOP.stock == {"widget": 8}
    assert journal.saga_ids() == ()


def test_a_run_context_parameter_is_not_journaled() -> None:
    sagacity = Sagacity()

    @compensable(reversibility=Reversibility.READ)
    def whoami(ctx: RunContext[str], greeting: str) -> str:
        return f"{greeting} {ctx.deps}"

    runner = Agent(
        FunctionModel(Script([("whoami", {"greeting": "hi"})], "done")),
        tools=wrap_tools(sagacity, [Tool(whoami)]),
        deps_type=str,
    )
    result = sagacity.saga("s-ctx", lambda: runner.run_sync("who", deps="bob").output)

    assert result.status is SagaStatus.COMPLETED
    intent, executed = sagacity.entries("s-ctx")[1:3]
    assert intent.payload == '{"greeting":"hi"}'
    assert executed.result == "hi bob"


def test_options_declare_an_undecorated_tool() -> None:
    sagacity = Sagacity()

    def ping(host: str) -> str:
        return f"pong {host}"

    tool = wrap_tool(sagacity, ping, reversibility=Reversibility.READ, name="ping_host")
    runner = Agent(FunctionModel(Script([("ping", {"host": "db"})], "ok")), tools=[tool])
    sagacity.saga("s-opt", lambda: runner.run_sync("ping").output)

    assert [e.tool for e in sagacity.entries("s-opt")][1:3] == ["ping_host", "ping_host"]


def undeclared(x: int) -> int:
    return x


@compensable(by="no_such_compensation")
def dangling(x: int) -> int:
    return x


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def needs_context(ctx: RunContext[None], x: int) -> int:
    return x


@pytest.mark.parametrize(
    ("tool", "options", "message"),
    [
        (undeclared, {}, "has no declaration"),
        (dangling, {}, "by='no_such_compensation' names no function"),
        (shop.reserve_inventory, {"reversibility": Reversibility.READ}, "declared twice"),
        (undeclared, {"reversibility": Reversibility.IRREVERSIBLE, "by": "x"}, "cannot declare"),
        (undeclared, {"by": "release_inventory"}, "pass reversibility= too"),
        (needs_context, {}, "resumed outside the agent run"),
        (undeclared, {"reversibility": "READ"}, "must be a Reversibility member"),
    ],
)
def test_a_wrong_declaration_fails_at_wrap_time(
    tool: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError, match=message):
        wrap_tool(Sagacity(), tool, **options)


def test_wrapping_twice_and_a_wrong_host_are_refused() -> None:
    sagacity = Sagacity()
    [tool] = wrap_tools(sagacity, [shop.check_stock])
    with pytest.raises(DeclarationError, match="already wrapped"):
        wrap_tool(sagacity, tool)
    with pytest.raises(DeclarationError, match="must be the Sagacity"):
        wrap_tools(object(), [shop.check_stock])  # type: ignore[arg-type]


def test_after_a_refusal_the_run_goes_on() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = ToolFailed("payment declined")
    # The model goes on after the refusal and asks to confirm: the gate stops that call.
    script = Script([RESERVE], [ORDER], [CONFIRM], "waiting for approval")
    runner = agent(sagacity, script)

    result = sagacity.saga("s-after", lambda: runner.run_sync("order").output)

    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert SHOP.sent == []
    assert SHOP.stock == {"widget": 8}
    assert ("send_confirmation", AWAITING) in script.seen


class Transfer(BaseModel):
    amount: Decimal
    to: str


WIRED: list[tuple[Transfer, date]] = []


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(transfer: Transfer, when: date) -> str:
    """Wire money (cannot be recalled)."""
    WIRED.append((transfer, when))
    return "wired"


def test_parsed_arguments_are_journaled_as_json_and_resumed_as_their_types() -> None:
    WIRED.clear()
    sagacity = Sagacity()
    call = ("wire", {"transfer": {"amount": "10.50", "to": "alice"}, "when": "2026-12-02"})
    runner = Agent(FunctionModel(Script([call], "waiting")), tools=wrap_tools(sagacity, [wire]))

    result = sagacity.saga("s-types", lambda: runner.run_sync("pay").output)

    assert result.status is SagaStatus.AWAITING_APPROVAL
    [request] = sagacity.pending_approvals("s-types")
    assert request.payload == '{"transfer":{"amount":"10.50","to":"alice"},"when":"2026-12-02"}'
    sagacity.approve("s-types", request.seq, "alice")
    sagacity.resume_saga("s-types", request.seq, request.payload)
    assert [(Transfer(amount=Decimal("10.50"), to="alice"), date(2026, 12, 2))] == WIRED
