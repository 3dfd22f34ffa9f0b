"""Replays of framework runs are safe: each framework's own replay path, run inside one saga
(a conversation), calls a tool with side effects once (docs/adr/0026-effects-and-refusals.md).

- LangGraph re-runs an interrupted node from its start when the thread is resumed
  (``Command(resume=...)``): the tool the node called before ``interrupt()`` is called again.
- The OpenAI Agents SDK resumes an approval from a saved ``RunState``; resuming the same saved
  state twice (a retried resume, a process that died before storing the new state) runs the
  approved tool again.
- Pydantic AI runs deferred tools when their results are handed back with the message history;
  handing the same results back twice runs the approved tool again.

Each test counts the effect in the tool itself, reads the chain (a ``REPLAYED`` naming the
first call's ``INTENT``) and checks the line the model (or the node) was given. docs/concepts.md
shows each of these replays, checked here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypedDict

from sagacity import CompensationContext, EventType, Sagacity, compensable, compensation, verify
from sagacity.chain._grammar import check
from sagacity.policy import Policy

E = EventType
CHARGED: list[str] = []
SENT: list[str] = []


@compensable(effect_key=["order_id"], by="refund")
def charge(order_id: str, amount: int) -> str:
    """Charge an order (keyed by the order: charged once per saga)."""
    CHARGED.append(order_id)
    return f"charged {order_id} {amount}"


@compensation
def refund(context: CompensationContext) -> None:
    CHARGED.remove(context.arguments["order_id"])


def _replayed_once(sagacity: Sagacity, saga_id: str) -> None:
    entries = sagacity.entries(saga_id)
    replays = [e for e in entries if e.event_type is E.REPLAYED]
    assert len(replays) == 1
    first = next(e for e in entries if e.seq == replays[0].ref_seq)
    assert first.event_type is E.INTENT
    assert first.tool == replays[0].tool
    assert verify(entries).ok
    assert check(entries) == []


# --- LangGraph: an interrupted node re-runs on resume -------------------------------------------


class Checkout(TypedDict, total=False):
    order_id: str
    receipt: str
    told: str
    answer: str


def test_a_langgraph_node_that_charges_then_interrupts_charges_once_when_resumed() -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    from sagacity.adapters.langchain import wrap_tool

    CHARGED.clear()
    sagacity = Sagacity()
    charging = sagacity.wrap(charge)
    as_tool = wrap_tool(sagacity, charge)  # what a model would be handed
    runs: list[str] = []

    def checkout(state: Checkout) -> Checkout:
        runs.append("checkout")
        receipt = charging(state["order_id"], 20)  # code calls it: gets the result
        told = as_tool.invoke({"order_id": state["order_id"], "amount": 20})
        answer = interrupt({"receipt": receipt, "question": "ship it?"})
        return {"receipt": receipt, "told": told, "answer": answer}

    graph = (
        StateGraph(Checkout)
        .add_node("checkout", checkout)
        .add_edge(START, "checkout")
        .add_edge("checkout", END)
        .compile(checkpointer=InMemorySaver())
    )
    config: Any = {"configurable": {"thread_id": "thread-1"}}
    conversation = sagacity.conversation("thread-1")

    first = conversation.call(lambda: graph.invoke({"order_id": "o-1"}, config))
    assert "__interrupt__" in first
    done = conversation.call(lambda: graph.invoke(Command(resume="yes"), config))

    assert runs == ["checkout", "checkout"]  # the node ran again from its start
    assert CHARGED == ["o-1"]  # the charge did not
    assert done["receipt"] == "charged o-1 20"
    assert done["answer"] == "yes"
    line, result = done["told"].split("\n")
    assert line == (
        "[REPLAYED] Tool 'charge' was not called again: the call at seq 2 of saga thread-1 "
        "already did this (same order_id); its recorded result follows."
    )
    assert result == "charged o-1 20"
    assert conversation.end().status.value == "COMPLETED"
    kinds = [e.event_type for e in sagacity.entries("thread-1")]
    assert kinds.count(E.EXECUTED) == 1
    assert kinds.count(E.REPLAYED) == 3  # the tool's call and both calls of the re-run


# --- OpenAI Agents SDK: an approval resumed twice from the saved state ---------------------------


def test_an_agents_sdk_approval_resumed_twice_from_its_saved_state_sends_once() -> None:
    from agents import Agent, RunConfig, Runner, RunState, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity.adapters.openai_agents import journaled

    SENT.clear()

    def send_email(to: str, subject: str) -> str:
        """Send an e-mail (the SDK asks a person first)."""
        SENT.append(to)
        return f"sent {subject!r} to {to}"

    sagacity = Sagacity()
    model = ScriptedModel(
        [
            [function_call("send_email", {"to": "a@x", "subject": "hi"}, call_id="c1")],
            [assistant_message("done")],
            [assistant_message("done again")],
        ]
    )
    policy = Policy({"send_email": {"reversibility": "COMPENSATABLE", "key": ["to", "subject"]}})
    agent = journaled(
        Agent(name="mail", model=model, tools=[function_tool(send_email, needs_approval=True)]),
        sagacity,
        policy=policy,
    )
    run = RunConfig(tracing_disabled=True)
    conversation = sagacity.conversation("mail-1")

    async def scenario() -> list[str]:
        first = await conversation.call_async(lambda: Runner.run(agent, "mail a", run_config=run))
        [pending] = first.interruptions
        state = first.to_state()
        state.approve(pending)
        saved = json.dumps(state.to_json())  # what the application stored
        outputs = []
        for _ in range(2):  # resumed, then resumed again from the same stored state
            again = await RunState.from_json(agent, json.loads(saved))
            result = await conversation.call_async(
                lambda again=again: Runner.run(agent, again, run_config=run)
            )
            outputs.extend(
                str(item["output"])
                for item in result.to_input_list()
                if isinstance(item, dict) and item.get("type") == "function_call_output"
            )
        return outputs

    outputs = asyncio.run(scenario())
    assert SENT == ["a@x"]
    assert outputs[0] == "sent 'hi' to a@x"
    assert outputs[-1].startswith(
        "[REPLAYED] Tool 'send_email' was not called again: the call at seq 2 of saga mail-1 "
        "already did this (same to, subject); its recorded result follows.\n"
    )
    assert outputs[-1].endswith("sent 'hi' to a@x")
    _replayed_once(sagacity, "mail-1")


# --- Pydantic AI: deferred tool results handed back twice ----------------------------------------


def test_pydantic_ai_deferred_results_handed_back_twice_send_once() -> None:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from sagacity.adapters.pydantic_ai import journaled

    SENT.clear()
    seen: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": "a@x"}, "t1")])
        seen.extend(str(p.content) for p in messages[-1].parts if hasattr(p, "content"))
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(script), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        """Send an e-mail (Pydantic AI asks a person first)."""
        SENT.append(to)
        return f"sent to {to}"

    sagacity = Sagacity()
    policy = Policy({"send_email": {"reversibility": "COMPENSATABLE", "key": ["to"]}})
    hooked = journaled(agent, sagacity, policy=policy)
    conversation = sagacity.conversation("pai-1")
    first = conversation.call(lambda: hooked.run_sync("mail a"))
    assert isinstance(first.output, DeferredToolRequests)
    history = first.all_messages()
    approved = DeferredToolResults(approvals={c.tool_call_id: True for c in first.output.approvals})
    for _ in range(2):  # the results handed back, then handed back again (a retried request)
        conversation.call(
            lambda: hooked.run_sync(message_history=history, deferred_tool_results=approved)
        )

    assert SENT == ["a@x"]
    assert seen[0] == "sent to a@x"
    assert seen[1] == (
        "[REPLAYED] Tool 'send_email' was not called again: the call at seq 2 of saga pai-1 "
        "already did this (same to); its recorded result follows.\nsent to a@x"
    )
    _replayed_once(sagacity, "pai-1")
