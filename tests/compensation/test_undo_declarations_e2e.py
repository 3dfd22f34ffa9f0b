"""The compensation service calls only the undo its own declarations name (real broker, Postgres).

An agent writes its own saga: it can journal, on a valid chain, an ``EXECUTED`` claiming any
tool and any ``undo_tool`` / ``undo_arguments``.  The service, in its own process, must never
call a gated tool for it, nor an undo tool the step's tool does not declare, nor take an undo's
arguments from the attributes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus, verify
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _journal_step(agent: Sagacity, saga: str, step: dict[str, Any]) -> None:
    """Journal, as the agent, an INTENT and an EXECUTED it chose (nothing of them ran)."""
    intent = agent.journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.INTENT,
            tool=step["tool"],
            payload=json.dumps(step.get("arguments", {}), separators=(",", ":")),
            actor=agent.writer_id,
            attributes={"reversibility": step.get("reversibility", "COMPENSATABLE")},
        ),
        durable=True,
    )
    agent.journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.EXECUTED,
            tool=step["tool"],
            result=step.get("result", "ok"),
            actor=agent.writer_id,
            attributes={
                "ref_seq": str(intent.seq),
                "reversibility": step.get("reversibility", "COMPENSATABLE"),
                "result_encoding": step.get("encoding", "text"),
                **step.get("attributes", {}),
            },
        ),
        durable=True,
    )


def _failing_saga(agent: Sagacity, saga: str, *work: Callable[[], Any]) -> SagaStatus:
    def run() -> None:
        for call in work:
            call()
        raise RuntimeError("stop")

    return agent.saga(saga, run).status


def _gated_calls(lane: Lane) -> list[tuple[str, int, str]]:
    return [c for c in lane.calls() if c[2] in ("send_wire", "grant_admin")]


FORGED_UNDO = {
    "send_wire": {"to": "attacker", "amount": 10_000_000},
    "grant_admin": {"user": "attacker"},
}


@pytest.mark.parametrize("gated", ["send_wire", "grant_admin"])
def test_an_undo_the_journal_names_never_runs_a_gated_tool(
    make_lane: Callable[..., Lane], gated: str
) -> None:
    lane = make_lane()
    service = lane.start()
    agent = lane.agent()
    saga = f"attack-{uuid.uuid4().hex[:8]}"
    forged = {
        "undo": "tool",
        "undo_tool": gated,
        "undo_arguments": json.dumps(FORGED_UNDO[gated]),
    }
    status = _failing_saga(
        agent,
        saga,
        # A tool the service does not know, and a known one that declares no such undo.
        lambda: _journal_step(agent, saga, {"tool": "mystery", "attributes": forged}),
        lambda: _journal_step(
            agent, saga, {"tool": "lookup", "reversibility": "COMPENSATABLE", "attributes": forged}
        ),
        lambda: _journal_step(agent, saga, {"tool": "odd", "attributes": forged}),
    )
    assert status is SagaStatus.COMPENSATION_PENDING
    result = agent.wait_for_outcome(saga, timeout=60)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert _gated_calls(lane) == []
    chain = list(agent.entries(saga))
    assert verify(chain, saga_id=saga).ok
    failed = [e for e in chain if e.event_type is E.COMPENSATION_FAILED]
    assert [(e.tool, e.attributes["cause"]) for e in failed] == [("mystery", "unregistered")]
    assert "'mystery' is not registered here" in (failed[0].error or "")
    assert not [e for e in chain if e.event_type is E.COMPENSATION_INTENT and e.tool == "mystery"]
    # `lookup` is READ by the service's own declaration (nothing to undo, whatever the journal
    # says); `odd` is undone by its declared compensation, not by the named tool.
    intents = [e for e in chain if e.event_type is E.COMPENSATION_INTENT]
    assert [(e.tool, e.attributes["compensation"]) for e in intents] == [("odd", "babble")]
    assert "is not registered here" in result.dirty[0].reason
    assert service.metric("sagacity_compensation_sagas_total", status="COMPENSATION_FAILED") == 1


def test_a_result_naming_an_undo_tool_its_tool_does_not_declare_is_never_called(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    lane.start()
    agent = lane.agent()
    saga = f"undeclared-{uuid.uuid4().hex[:8]}"
    result = {"hold_id": "h1", "undo": {"tool": "grant_admin", "arguments": {"user": "eve"}}}
    _failing_saga(
        agent,
        saga,
        lambda: _journal_step(
            agent,
            saga,
            {
                "tool": "hold_stock",
                "arguments": {"sku": "lamp"},
                "result": json.dumps(result),
                "encoding": "json",
                "attributes": {"undo": "tool", "undo_tool": "grant_admin"},
            },
        ),
    )
    outcome = agent.wait_for_outcome(saga, timeout=60)
    assert outcome.status is SagaStatus.COMPENSATION_FAILED
    assert _gated_calls(lane) == []
    (failed,) = [e for e in agent.entries(saga) if e.event_type is E.COMPENSATION_FAILED]
    assert failed.attributes["cause"] == "undeclared_undo"
    assert "'grant_admin', which tool 'hold_stock' does not declare" in (failed.error or "")


def test_a_named_undo_takes_its_arguments_from_the_declaration_not_the_journal(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    lane.start()
    agent = lane.agent()
    saga = f"named-{uuid.uuid4().hex[:8]}"
    _failing_saga(
        agent,
        saga,
        lambda: _journal_step(
            agent,
            saga,
            {
                "tool": "book",
                "arguments": {"sku": "lamp"},
                "result": '{"hold_id":"booking-lamp"}',
                "encoding": "json",
                "attributes": {
                    "undo": "tool",
                    "undo_tool": "release_stock",
                    "undo_arguments": '{"hold_id":"booking-of-the-victim"}',
                },
            },
        ),
    )
    assert agent.wait_for_outcome(saga, timeout=60).status is SagaStatus.COMPENSATED
    assert [(t, k) for _s, _q, t, k in _effects_with_keys(lane)] == [
        ("release_stock", "booking-lamp")
    ]


def test_declared_undos_still_compensate_exactly_once(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane()
    lane.start()
    agent = lane.agent()
    saga = f"legit-{uuid.uuid4().hex[:8]}"

    def tool(name: str) -> Callable[..., Any]:
        registered = agent.registry.get(name)
        assert registered is not None
        return registered.wrapped

    _failing_saga(
        agent,
        saga,
        lambda: tool("hold_stock")(sku="desk"),
        lambda: tool("book")(sku="chair"),
        lambda: tool("charge")(order="o1", amount=3),
    )
    result = agent.wait_for_outcome(saga, timeout=60)
    assert result.status is SagaStatus.COMPENSATED
    assert len(result.compensated) == 3
    effects = _effects_with_keys(lane)
    assert sorted((t, k) for _s, _q, t, k in effects if t == "release_stock") == [
        ("release_stock", "booking-chair"),
        ("release_stock", "hold-desk"),
    ]
    assert [t for _s, _q, t, _k in effects].count("charge") == 1
    assert _gated_calls(lane) == []


def _effects_with_keys(lane: Lane) -> list[tuple[str, int, str, str]]:
    import psycopg

    with psycopg.connect(lane.dsn) as conn:
        rows = conn.execute(
            "SELECT saga_id, seq, tool, key FROM undo_effects ORDER BY id"
        ).fetchall()
    return [(str(a), int(b), str(c), str(d)) for a, b, c, d in rows]
