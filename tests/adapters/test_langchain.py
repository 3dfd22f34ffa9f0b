"""LangChain tools through ``sagacity.adapters.langchain``, run by a LangGraph agent graph.

The graph is LangGraph's standard tool-calling loop (a model node, a ``ToolNode``, and
``tools_condition`` between them) driven by LangChain's ``GenericFakeChatModel``, which replays
a fixed list of messages: no network, no API key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool, ToolException, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from sagacity import (
    CompensationContext,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
)
from sagacity.adapters.langchain import wrap_tool, wrap_tools
from sagacity.errors import DeclarationError

from . import shop
from .shop import SHOP, E, kinds

AWAITING = "[AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval"


@pytest.fixture(autouse=True)
def _fresh_shop() -> Iterator[None]:
    SHOP.reset()
    yield
    SHOP.reset()


def calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call-{name}-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


def graph(tools: Sequence[Any], *turns: AIMessage | str, handle_tool_errors: Any = True) -> Any:
    model = GenericFakeChatModel(
        messages=iter(AIMessage(content=t) if isinstance(t, str) else t for t in turns)
    )

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def shop_tools(sagacity: Sagacity) -> list[StructuredTool]:
    return wrap_tools(
        sagacity,
        [
            tool(shop.check_stock),
            tool(shop.reserve_inventory),
            # The framework's own error handling: a ToolException becomes the tool's output.
            StructuredTool.from_function(
                coroutine=shop.create_order,
                name="create_order",
                description="Create an order.",
                handle_tool_error=True,
            ),
            tool(shop.send_confirmation),
        ],
    )


RESERVE = ("reserve_inventory", {"sku": "widget", "quantity": 2})
ORDER = ("create_order", {"sku": "widget", "quantity": 2})
CONFIRM = ("send_confirmation", {"order_id": "order-1", "email": "a@example.com"})


def tool_outputs(state: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    return [
        (m.name, str(m.content), m.status) for m in state["messages"] if isinstance(m, ToolMessage)
    ]


@pytest.mark.parametrize(
    ("error", "handle_tool_errors", "shown"),
    [
        # BaseTool.run's handle_tool_error turns the ToolException into the output.
        (ToolException("payment declined"), False, "payment declined"),
        # ToolNode turns any exception into an error ToolMessage.
        (RuntimeError("payment declined"), True, "payment declined"),
    ],
    ids=["handle_tool_error", "ToolNode"],
)
def test_a_failure_the_framework_hands_to_the_model_still_compensates(
    error: Exception, handle_tool_errors: bool, shown: str
) -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = error
    agent = graph(
        shop_tools(sagacity),
        calls(RESERVE),
        calls(ORDER),
        "Sorry, the payment was declined.",
        handle_tool_errors=handle_tool_errors,
    )

    async def work() -> dict[str, Any]:
        return await agent.ainvoke({"messages": [HumanMessage("order two widgets")]})

    result = asyncio.run(sagacity.saga_async("s-1", work))

    state = result.value
    assert state["messages"][-1].content == "Sorry, the payment was declined."
    [(reserved, _, _), (name, output, _)] = tool_outputs(state)
    assert (reserved, name) == ("reserve_inventory", "create_order")
    assert shown in output
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
    assert entries[3].payload == '{"sku":"widget","quantity":2}'
    assert entries[4].error == f"{type(error).__name__}: payment declined"


def test_the_gate_returns_awaiting_to_the_agent_and_resume_runs_the_exact_payload() -> None:
    sagacity = Sagacity()
    tools = wrap_tools(sagacity, [tool(shop.reserve_inventory), tool(shop.send_confirmation)])
    agent = graph(tools, calls(RESERVE), calls(CONFIRM), "Waiting for approval.")

    result = sagacity.saga("s-gate", lambda: agent.invoke({"messages": [HumanMessage("go")]}))

    assert ("send_confirmation", AWAITING, "success") in tool_outputs(result.value)
    assert result.value["messages"][-1].content == "Waiting for approval."
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


def test_sync_and_async_tools_are_journaled_in_an_async_run() -> None:
    sagacity = Sagacity()
    tools = wrap_tools(
        sagacity, [tool(shop.check_stock), tool(shop.reserve_inventory), tool(shop.create_order)]
    )
    agent = graph(
        tools, calls(("check_stock", {"sku": "widget"})), calls(RESERVE), calls(ORDER), "ok"
    )

    # The async graph awaits the async tools and runs the sync one on a worker thread.
    async def work() -> dict[str, Any]:
        return await agent.ainvoke({"messages": [HumanMessage("order")]})

    result = asyncio.run(sagacity.saga_async("s-mixed", work))

    assert result.status is SagaStatus.COMPLETED
    executed = [e for e in sagacity.entries("s-mixed") if e.event_type is E.EXECUTED]
    assert [(e.tool, e.result) for e in executed] == [
        ("check_stock", "10"),
        ("reserve_inventory", '{"sku":"widget","quantity":2}'),
        ("create_order", "order-1"),
    ]


def test_a_sync_tool_invoked_directly_inside_a_saga_is_journaled() -> None:
    sagacity = Sagacity()
    [reserve] = wrap_tools(sagacity, [tool(shop.reserve_inventory)])

    result = sagacity.saga("s-direct", lambda: reserve.invoke({"sku": "widget", "quantity": 1}))

    assert result.value == {"sku": "widget", "quantity": 1}
    assert kinds(sagacity.entries("s-direct"))[1:3] == [
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
    ]


def test_injected_arguments_are_not_journaled_and_options_declare_a_plain_function() -> None:
    sagacity = Sagacity()
    undone: list[str] = []

    def book(slot: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Book a slot."""
        return f"booked {slot} ({tool_call_id})"

    def unbook(context: CompensationContext) -> None:
        undone.append(context.arguments["slot"])

    booked = wrap_tool(sagacity, book, reversibility=Reversibility.COMPENSATABLE, by=unbook)
    agent = graph([booked], calls(("book", {"slot": "9am"})), "booked")

    def work() -> Any:
        agent.invoke({"messages": [HumanMessage("book")]})
        raise RuntimeError("the caller gave up")

    result = sagacity.saga("s-injected", work)

    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["9am"]
    intent, executed = sagacity.entries("s-injected")[1:3]
    assert intent.payload == '{"slot":"9am"}'
    assert executed.result == "booked 9am (call-book-0)"


def test_options_declare_the_undo_tools_a_result_may_name() -> None:
    sagacity = Sagacity()
    released: list[str] = []

    def hold(slot: str) -> dict[str, Any]:
        """Hold a slot."""
        return {"undo": {"tool": "release", "arguments": {"slot": slot}}}

    def release(slot: str) -> str:
        """Release a slot."""
        released.append(slot)
        return "released"

    wrap_tool(sagacity, release, reversibility=Reversibility.REVERSIBLE)
    held = wrap_tool(
        sagacity, hold, reversibility=Reversibility.REVERSIBLE, undo_tools=("release",)
    )
    agent = graph([held], calls(("hold", {"slot": "9am"})), "held")

    def work() -> Any:
        agent.invoke({"messages": [HumanMessage("hold")]})
        raise RuntimeError("the caller gave up")

    assert sagacity.saga("s-undo-tools", work).status is SagaStatus.COMPENSATED
    assert released == ["9am"]
    with pytest.raises(DeclarationError, match="complete a declaration"):
        wrap_tool(Sagacity(), hold, undo_tools=("release",))


def test_outside_a_saga_the_tools_run_unjournaled() -> None:
    journal = InMemoryJournal()
    sagacity = Sagacity(journal)
    [reserve] = wrap_tools(sagacity, [tool(shop.reserve_inventory)])
    assert reserve.invoke({"sku": "widget", "quantity": 3}) == {"sku": "widget", "quantity": 3}
    assert journal.saga_ids() == ()


def undeclared(x: int) -> int:
    """Echo."""
    return x


@compensable(by="no_such_compensation")
def dangling(x: int) -> int:
    """Echo."""
    return x


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def needs_call_id(x: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> int:
    """Echo."""
    return x


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        (undeclared, {}, "has no declaration"),
        (dangling, {}, "by='no_such_compensation' names no function"),
        (shop.reserve_inventory, {"reversibility": Reversibility.READ}, "declared twice"),
        (undeclared, {"reversibility": Reversibility.READ, "by": "x"}, "cannot declare"),
        (needs_call_id, {}, "resumed outside the agent run"),
        (42, {}, "expected a LangChain tool"),
    ],
)
def test_a_wrong_declaration_fails_at_wrap_time(
    target: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError, match=message):
        wrap_tool(Sagacity(), tool(target) if callable(target) else target, **options)


def test_a_tool_not_backed_by_a_function_is_refused() -> None:
    from langchain_core.tools import BaseTool

    class Custom(BaseTool):
        name: str = "custom"
        description: str = "custom"

        def _run(self, x: int) -> int:
            return x

    with pytest.raises(DeclarationError, match="only tools backed by functions"):
        wrap_tool(Sagacity(), Custom(), reversibility=Reversibility.READ)
