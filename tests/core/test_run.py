"""``Sagacity.open_run``: a saga held open across calls that arrive one at a time."""

from __future__ import annotations

import asyncio

import pytest

from sagacity import (
    CompensationContext,
    EventType,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
)
from sagacity.errors import NestedSagaError, SagaClosedError, SagaExistsError, SagaFailedError

E = EventType


class Shop:
    def __init__(self) -> None:
        self.held: list[str] = []

    @compensable(by="release")
    def hold(self, sku: str) -> str:
        if sku == "broken":
            raise RuntimeError("no such sku")
        self.held.append(sku)
        return f"held {sku}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        self.held.remove(context.arguments["sku"])

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def ship(self, sku: str) -> str:
        return f"shipped {sku}"

    @compensable(by="release")
    async def hold_async(self, sku: str) -> str:
        self.held.append(sku)
        return f"held {sku}"


def _kinds(sagacity: Sagacity, saga_id: str) -> list[EventType]:
    return [e.event_type for e in sagacity.entries(saga_id)]  # type: ignore[misc]


def test_calls_arriving_one_by_one_share_the_saga_and_end_completed() -> None:
    sagacity = Sagacity()
    shop = Shop()
    tools = sagacity.wrap(shop)
    run = sagacity.open_run("r-1")
    assert run.call(lambda: tools.hold("a")) == "held a"
    assert run.call(lambda: tools.hold("b")) == "held b"
    assert asyncio.run(run.call_async(lambda: tools.hold_async("c"))) == "held c"
    result = run.end()
    assert result.status is SagaStatus.COMPLETED
    assert run.end() is result  # idempotent
    assert _kinds(sagacity, "r-1") == [E.SAGA_OPENED] + [E.INTENT, E.EXECUTED] * 3 + [E.SAGA_ENDED]
    with pytest.raises(SagaClosedError):
        run.call(lambda: tools.hold("d"))
    assert shop.held == ["a", "b", "c"]


def test_a_failed_step_is_compensated_at_the_end_and_refuses_further_side_effects() -> None:
    sagacity = Sagacity()
    shop = Shop()
    tools = sagacity.wrap(shop)
    run = sagacity.open_run("r-2")
    run.call(lambda: tools.hold("a"))
    with pytest.raises(RuntimeError):
        run.call(lambda: tools.hold("broken"))
    assert run.failure is not None
    # Another tool's side effect would only be undone: refused (a retry of hold would run).
    with pytest.raises(SagaFailedError):
        asyncio.run(run.call_async(lambda: tools.hold_async("b")))
    result = run.end()
    assert result.status is SagaStatus.COMPENSATED
    assert shop.held == []


def test_a_gate_leaves_the_saga_awaiting_approval() -> None:
    sagacity = Sagacity()
    tools = sagacity.wrap(Shop())
    run = sagacity.open_run("r-3")
    assert run.call(lambda: tools.ship("x")).startswith("[AWAITING_APPROVAL]")
    assert [g.tool for g in run.gates] == ["ship"]
    result = run.end()
    assert result.status is SagaStatus.AWAITING_APPROVAL
    sagacity.approve("r-3", run.gates[0].seq, "boss@example.com")
    done = sagacity.resume_saga("r-3", run.gates[0].seq, '{"sku":"x"}')
    assert done.status is SagaStatus.COMPLETED


def test_a_run_does_not_nest_and_its_id_is_taken() -> None:
    sagacity = Sagacity()
    tools = sagacity.wrap(Shop())
    run = sagacity.open_run("r-4")
    with pytest.raises(SagaExistsError):
        sagacity.open_run("r-4")
    with pytest.raises(NestedSagaError):
        run.call(lambda: sagacity.saga("inner", lambda: tools.hold("z")))
    other = sagacity.open_run("r-5")

    def nested() -> None:
        other.call(lambda: None)

    with pytest.raises(NestedSagaError):
        run.call(nested)
    run.end()
    other.end()
