"""``undo_saga`` over MCP: an agent stops its own open saga (its completed steps undone once),
is told what an operator runs for an ended one, and cannot touch another principal's
(docs/adr/0026-effects-and-refusals.md).  In process, with the SDK's in-memory client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from sagacity import (
    CompensationContext,
    EventType,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
    verify,
)
from sagacity.adapters.mcp import SAGA_REFUSED, TOOL_REFUSED, SagacityMCP
from sagacity.adapters.mcp._undo import undo_saga
from sagacity.chain._grammar import check
from sagacity.saga._scope import calling_as

E = EventType


class Desk:
    def __init__(self) -> None:
        self.held: list[str] = []
        self.mailed: list[str] = []

    @compensable(by="release")
    def hold(self, room: str) -> str:
        """Hold a room."""
        self.held.append(room)
        return f"held {room}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        self.held.remove(context.arguments["room"])

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def mail(self, to: str) -> str:
        """Mail a guest."""
        self.mailed.append(to)
        return "mailed"


@dataclass(frozen=True)
class Agent:
    name: str
    tools: frozenset[str]

    def may_call(self, tool: str) -> bool:
        return tool in self.tools


def _server(sagacity: Sagacity, who: list[Agent]) -> SagacityMCP:
    server = SagacityMCP(sagacity)
    server.set_caller_source(lambda _request: who[0])
    return server


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


ALICE = Agent("alice-bot", frozenset({"hold", "mail", "undo_saga"}))
MALLORY = Agent("mallory-bot", frozenset({"hold", "undo_saga"}))
NO_UNDO = Agent("plain-bot", frozenset({"hold"}))


def _open_saga(server: SagacityMCP, sagacity: Sagacity, saga_id: str, rooms: list[str]) -> None:
    """A saga open in the server (a client named it), its calls made by alice-bot."""
    tool = sagacity.registry.get("hold")
    assert tool is not None

    async def open_it() -> None:
        async with server.sessions.hold(session=object(), saga_id=saga_id, owner=ALICE.name) as s:
            run = await server.sessions.ensure_run(s, saga_id)
            with calling_as(ALICE.name):
                for room in rooms:
                    run.call(lambda room=room: tool.wrapped(room=room))

    asyncio.run(open_it())


def test_an_agent_stops_its_open_saga_and_its_steps_are_undone_once() -> None:
    sagacity = Sagacity()
    desk = Desk()
    sagacity.wrap(desk)
    server = _server(sagacity, [ALICE])
    _open_saga(server, sagacity, "trip-1", ["101", "102"])
    assert server.sessions.open_sagas() == ["trip-1"]

    first = asyncio.run(undo_saga(server, "trip-1", "the guest cancelled", ALICE.name))
    again = asyncio.run(undo_saga(server, "trip-1", "the guest cancelled", ALICE.name))

    assert desk.held == []
    assert _text(first).startswith("saga trip-1 was stopped: ")
    assert first.structured_content["status"] == SagaStatus.COMPENSATED.value
    assert server.sessions.open_sagas() == []
    # Asked again, the saga has ended: nothing more is undone, an operator would sign.
    assert again.structured_content["status"] == "needs_operator"
    assert "sagacity saga undo --saga trip-1" in _text(again)
    chain = sagacity.entries("trip-1")
    assert [e.event_type for e in chain].count(E.COMPENSATED) == 2
    assert "undo_saga by alice-bot: the guest cancelled" in (chain[-1].error or "")
    assert verify(chain).ok
    assert check(chain) == []


def test_an_ended_saga_is_answered_with_what_an_undo_reverses_and_what_not() -> None:
    sagacity = Sagacity()
    desk = Desk()
    tools = sagacity.wrap(desk)
    server = _server(sagacity, [ALICE])
    with calling_as(ALICE.name):
        ended = sagacity.saga("trip-2", lambda: (tools.hold("7"), tools.mail("guest@x")))
    assert ended.status is SagaStatus.AWAITING_APPROVAL
    assert ended.awaiting_seq is not None
    sagacity.approve("trip-2", ended.awaiting_seq, "boss@example.com")
    sagacity.resume_saga("trip-2", ended.awaiting_seq, '{"to":"guest@x"}')

    answer = asyncio.run(undo_saga(server, "trip-2", "no", ALICE.name))
    assert answer.structured_content["status"] == "needs_operator"
    assert [s["tool"] for s in answer.structured_content["reversed"]] == ["hold"]
    assert [s["tool"] for s in answer.structured_content["kept"]] == ["mail"]
    assert "Warning: an undo cannot reverse 1 step(s): seq " in _text(answer)
    assert "nothing was journaled" in _text(answer)
    assert desk.held == ["7"]  # an agent does not undo finished work on its own word
    assert sagacity.outcome("trip-2").status is SagaStatus.COMPLETED  # type: ignore[union-attr]


def test_only_the_sagas_opener_undoes_it_and_only_an_agent_given_the_tool() -> None:
    sagacity = Sagacity()
    desk = Desk()
    sagacity.wrap(desk)
    who = [MALLORY]
    server = _server(sagacity, who)
    _open_saga(server, sagacity, "trip-3", ["9"])

    async def scenario() -> list[Any]:
        seen: list[Any] = []
        async with Client(server.server) as client:
            for agent in (MALLORY, NO_UNDO):
                who[0] = agent
                try:
                    await client.call_tool("undo_saga", {"saga_id": "trip-3", "reason": "x"})
                except MCPError as exc:
                    seen.append(exc)
            listed = await client.list_tools()
            seen.append(sorted(t.name for t in listed.tools))
        return seen

    mallory, plain, listed = asyncio.run(scenario())
    assert mallory.error.code == SAGA_REFUSED
    assert "opened by another principal" in mallory.error.message
    assert plain.error.code == TOOL_REFUSED
    assert listed == ["hold"]  # undo_saga is listed only to agents given it
    assert desk.held == ["9"]
    assert server.sessions.open_sagas() == ["trip-3"]
    assert sagacity.entries("trip-3")[-1].event_type is E.EXECUTED  # nothing journaled


def test_an_unknown_saga_is_refused() -> None:
    sagacity = Sagacity()
    sagacity.wrap(Desk())
    server = _server(sagacity, [ALICE])
    with pytest.raises(MCPError, match="unknown"):
        asyncio.run(undo_saga(server, "nope", "x", ALICE.name))
