"""``SagacityMiddleware``: every tool call of a LangChain agent (and a LangGraph ``ToolNode``).

Driven by LangChain's ``GenericFakeChatModel`` (a scripted list of messages), which records
nothing, so the test records what the model is sent from the messages it receives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from sagacity import CompensationContext, Sagacity, SagaStatus
from sagacity.adapters.langchain import SagacityMiddleware
from sagacity.errors import DeclarationError
from sagacity.policy import Policy

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


def unhold(context: CompensationContext) -> None:
    UNDONE.append(f"unhold {context.arguments['sku']}")


class Scripted(GenericFakeChatModel):
    """A fake chat model that accepts tools and records the tool messages it is sent."""

    seen: list[tuple[str, str]] = []  # noqa: RUF012 - reset per test

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        tail = []
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                break
            tail.append((message.name or "", str(message.content)))
        Scripted.seen.extend(reversed(tail))
        return super()._generate(messages, *args, **kwargs)


def model(*turns: AIMessage | str) -> Scripted:
    Scripted.seen = []
    return Scripted(messages=iter(AIMessage(content=t) if isinstance(t, str) else t for t in turns))


def calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call-{name}-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


@tool
def hold(sku: str, quantity: int) -> str:
    """Hold units (declared by the policy)."""
    SHOP.calls.append("hold")
    return f"held {quantity} {sku}"


@tool
def search_orders(text: str) -> list[str]:
    """Search orders."""
    return [text]


class Lookup(BaseTool):
    """A tool class with its own _run (no function to journal), annotated read-only."""

    name: str = "lookup_price"
    description: str = "Look a price up."
    metadata: dict[str, Any] | None = {"annotations": {"readOnlyHint": True}}  # noqa: RUF012

    def _run(self, sku: str) -> str:
        return f"{sku}: 3"


def check_stock_sync(sku: str) -> int:
    return asyncio.run(shop.check_stock(sku))


def create_order_sync(sku: str, quantity: int) -> str:
    return asyncio.run(shop.create_order(sku, quantity))


def tools() -> list[Any]:
    """A tool made every way LangChain allows: @tool, StructuredTool, a BaseTool class, a
    decorated function, and a tool raising ToolException handled into a message."""
    return [
        hold,
        search_orders,
        Lookup(),
        StructuredTool.from_function(
            func=check_stock_sync,
            coroutine=shop.check_stock,
            name="check_stock",
            description="Units in stock.",
        ),
        StructuredTool.from_function(
            func=create_order_sync,
            coroutine=shop.create_order,
            name="create_order",
            description="Create an order.",
            handle_tool_error=True,
        ),
        tool(shop.send_confirmation),
    ]


POLICY = Policy({"hold": {"by": f"{__name__}:unhold"}, "search_*": "READ"})
TURNS = [
    calls(("check_stock", {"sku": "widget"}), ("search_orders", {"text": "w"})),
    calls(("hold", {"sku": "widget", "quantity": 2}), ("lookup_price", {"sku": "widget"})),
    calls(("create_order", {"sku": "widget", "quantity": 2})),
    "Done.",
]
EVERY_TOOL = ["check_stock", "search_orders", "hold", "lookup_price", "create_order"]


def agent(sagacity: Sagacity, *turns: AIMessage | str, **options: Any) -> Any:
    middleware = SagacityMiddleware(sagacity, policy=POLICY, tools=tools(), **options)
    return create_agent(model(*turns), tools(), middleware=[middleware])


def saga_of(sagacity: Sagacity, state: dict[str, Any]) -> str:
    return str(state["sagacity_saga_id"])


@pytest.mark.kafka
def test_every_tool_of_create_agent_is_journaled_on_the_topic(kafka: KafkaLane) -> None:
    state = agent(kafka.sagacity, *TURNS).invoke({"messages": [("user", "order")]})

    assert state["messages"][-1].content == "Done."
    saga = saga_of(kafka.sagacity, state)
    assert kafka.sagacity.outcome(saga).status is SagaStatus.COMPLETED  # type: ignore[union-attr]
    counts = kafka.counts()
    for name in EVERY_TOOL:
        assert counts[(E.INTENT, name)] == 1, name
        assert counts[(E.EXECUTED, name)] == 1, name
    assert counts[(E.SAGA_OPENED, None)] == counts[(E.SAGA_ENDED, None)] == 1


@pytest.mark.kafka
def test_stream_and_astream_journal_the_same_chain_as_invoke(kafka: KafkaLane) -> None:
    def chain(state: dict[str, Any]) -> list[tuple[str, str | None]]:
        return sorted(kinds(kafka.sagacity.entries(saga_of(kafka.sagacity, state))))

    first = chain(agent(Sagacity(kafka.journal), *TURNS).invoke({"messages": [("user", "go")]}))
    SHOP.reset()
    states = list(
        agent(Sagacity(kafka.journal), *TURNS).stream(
            {"messages": [("user", "go")]}, stream_mode="values"
        )
    )
    second = chain(states[-1])
    SHOP.reset()

    async def astream() -> dict[str, Any]:
        last: dict[str, Any] = {}
        async for value in agent(Sagacity(kafka.journal), *TURNS).astream(
            {"messages": [("user", "go")]}, stream_mode="values"
        ):
            last = value
        return last

    third = chain(asyncio.run(astream()))
    assert first == second == third
    assert (E.EXECUTED, "lookup_price") in first


def test_an_uncovered_tool_is_refused_at_wrap_time_by_name() -> None:
    # lookup_price is covered by its read-only annotation.
    with pytest.raises(DeclarationError, match=r"tool\(s\) 'hold', 'search_orders':"):
        SagacityMiddleware(Sagacity(), policy=Policy({}), tools=tools())


def test_a_handled_tool_error_compensates_and_the_model_is_told() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = ToolException("payment declined")
    runner = agent(
        sagacity,
        calls(("hold", {"sku": "widget", "quantity": 2})),
        calls(("create_order", {"sku": "widget", "quantity": 2})),
        calls(("check_stock", {"sku": "widget"})),
        calls(("hold", {"sku": "gadget", "quantity": 1})),
        "Sorry.",
        saga_id=lambda: "lc-told",
    )

    state = runner.invoke({"messages": [("user", "order")]})

    assert state["messages"][-1].content == "Sorry."
    assert sagacity.outcome("lc-told").status is SagaStatus.COMPENSATED  # type: ignore[union-attr]
    assert UNDONE == ["unhold widget"]
    told = dict(Scripted.seen)
    assert told["create_order"] == (
        "payment declined\n[FAILED] Tool 'create_order' failed (payment declined); unless a "
        "retry of it succeeds, saga lc-told is rolled back when it ends, undoing: hold. Do not "
        "report success."
    )
    assert not told["check_stock"].startswith("[")  # a read still runs
    assert told["hold"] == (
        "[SAGA_FAILED] Tool 'hold' was not called: saga lc-told has a failed step "
        "('create_order') and is rolled back unless a retry of it succeeds. Do not report "
        "success."
    )
    assert (E.FAILED, "create_order") in kinds(sagacity.entries("lc-told"))
    assert kinds(sagacity.entries("lc-told")).count((E.EXECUTED, "hold")) == 1


def test_the_gate_line_reaches_the_model() -> None:
    sagacity = Sagacity()
    runner = agent(
        sagacity,
        calls(("send_confirmation", {"order_id": "o-1", "email": "a@example.com"})),
        "Waiting.",
        saga_id=lambda: "lc-gate",
    )
    runner.invoke({"messages": [("user", "confirm")]})

    [request] = sagacity.pending_approvals("lc-gate")
    assert Scripted.seen == [
        (
            "send_confirmation",
            "[AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval; it has not "
            f"run (saga lc-gate, request {request.seq}).",
        )
    ]
    assert SHOP.sent == []


def test_a_tool_node_takes_the_same_hook_inside_an_explicit_saga() -> None:
    sagacity = Sagacity()
    middleware = SagacityMiddleware(sagacity, policy=POLICY)
    chat = model(calls(("hold", {"sku": "widget", "quantity": 1})), "ok")

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [chat.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node(
        "tools",
        ToolNode(
            [hold],
            wrap_tool_call=middleware.wrap_tool_call,
            awrap_tool_call=middleware.awrap_tool_call,
        ),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()

    result = sagacity.saga("tn", lambda: graph.invoke({"messages": [("user", "hold one")]}))

    assert result.status is SagaStatus.COMPLETED
    assert (E.EXECUTED, "hold") in kinds(sagacity.entries("tn"))


def test_conversation_mode_keeps_one_saga_per_thread_until_ended() -> None:
    sagacity = Sagacity()
    middleware = SagacityMiddleware(sagacity, policy=POLICY, conversation=True)
    runner = create_agent(
        model(
            calls(("hold", {"sku": "a", "quantity": 1})),
            "one",
            calls(("hold", {"sku": "b", "quantity": 1})),
            "two",
        ),
        [hold],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t-9"}}
    runner.invoke({"messages": [("user", "first")]}, config)
    runner.invoke({"messages": [("user", "second")]}, config)
    result = sagacity.conversation("t-9").end()

    assert result.status is SagaStatus.COMPLETED
    chain = kinds(sagacity.entries("t-9"))
    assert chain.count((E.SAGA_OPENED, None)) == 1
    assert chain.count((E.EXECUTED, "hold")) == 2


def test_a_run_a_tool_exception_ends_is_compensated_at_the_next_run() -> None:
    sagacity = Sagacity()
    SHOP.create_order_error = RuntimeError("database down")
    middleware = SagacityMiddleware(sagacity, policy=POLICY, saga_id=lambda: "lc-raised")
    order = StructuredTool.from_function(
        func=create_order_sync,
        coroutine=shop.create_order,
        name="create_order",
        description="Create an order.",
    )
    runner = create_agent(
        model(
            calls(("hold", {"sku": "widget", "quantity": 2})),
            calls(("create_order", {"sku": "widget", "quantity": 2})),
        ),
        [hold, order],
        middleware=[middleware],
    )

    with pytest.raises(RuntimeError, match="database down"):
        runner.invoke({"messages": [("user", "order")]})

    [result] = middleware.end_abandoned()
    assert result.status is SagaStatus.COMPENSATED
    assert UNDONE == ["unhold widget"]
    assert kinds(sagacity.entries("lc-raised"))[-1] == (E.SAGA_ENDED, None)
