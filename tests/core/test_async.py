"""The saga scope follows asyncio: async tools, tasks created inside a saga, concurrent sagas."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

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
from sagacity.errors import NestedSagaError

from .conftest import Ledger, OrderTools, kinds, only

E = EventType


class AsyncTools:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.undone: list[CompensationContext] = []

    @compensable(by="cancel")
    async def book(self, ref: str) -> str:
        await asyncio.sleep(0)
        self.calls.append(ref)
        return f"booked-{ref}"

    @compensation
    async def cancel(self, context: CompensationContext) -> None:
        await asyncio.sleep(0)
        self.undone.append(context)

    @compensable
    async def fail(self) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("async boom")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def wire(self, amount: str, to: str) -> str:
        self.calls.append(f"wire {amount} {to}")
        return "wired"


@pytest.fixture
def async_tools() -> AsyncTools:
    return AsyncTools()


def test_wrapped_async_tool_is_still_a_coroutine_function(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)
    assert inspect.iscoroutinefunction(tools.book)


def test_async_tools_journal_into_the_saga(sagacity: Sagacity, async_tools: AsyncTools) -> None:
    tools = sagacity.wrap(async_tools)

    async def work() -> str:
        return str(await tools.book("a"))

    result = asyncio.run(sagacity.saga_async("async-1", work))
    assert result.status is SagaStatus.COMPLETED
    assert result.value == "booked-a"
    assert kinds(sagacity.journal.entries("async-1"))[1:3] == [
        (E.INTENT, "book"),
        (E.EXECUTED, "book"),
    ]


def test_tasks_created_inside_the_saga_journal_into_it(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)

    async def work() -> None:
        await asyncio.gather(*(asyncio.create_task(tools.book(str(i))) for i in range(10)))

    result = asyncio.run(sagacity.saga_async("tasks", work))
    assert result.status is SagaStatus.COMPLETED
    entries = sagacity.journal.entries("tasks")
    assert len(only(entries, E.EXECUTED)) == 10
    assert verify(entries).ok


def test_async_failure_compensates_with_async_compensation(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)

    async def work() -> None:
        await tools.book("x")
        await tools.fail()

    result = asyncio.run(sagacity.saga_async("async-fail", work))
    assert result.status is SagaStatus.COMPENSATED
    assert [c.result for c in async_tools.undone] == ["booked-x"]
    assert only(sagacity.journal.entries("async-fail"), E.FAILED)[0].error == (
        "RuntimeError: async boom"
    )


def test_async_compensation_also_runs_from_a_sync_saga(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)

    def work() -> None:
        asyncio.run(tools.book("y"))  # the task copies the saga's context
        raise RuntimeError("stop")

    result = sagacity.saga("mixed", work)
    assert result.status is SagaStatus.COMPENSATED
    assert [c.result for c in async_tools.undone] == ["booked-y"]


def test_async_gate_returns_the_message_from_the_coroutine(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)

    async def work() -> str:
        return str(await tools.wire(amount="100", to="alice"))

    result = asyncio.run(sagacity.saga_async("async-gate", work))
    assert result.value == "[AWAITING_APPROVAL] Tool 'wire' requires human approval"
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert async_tools.calls == []
    sagacity.approve("async-gate", result.awaiting_seq or 0, "manager@company.com")
    resumed = asyncio.run(
        sagacity.resume_saga_async(
            "async-gate", result.awaiting_seq or 0, '{"amount":"100","to":"alice"}'
        )
    )
    assert resumed.status is SagaStatus.COMPLETED
    assert resumed.value == "wired"
    # The sync entry point can resume an async tool too.
    assert async_tools.calls == ["wire 100 alice"]


def test_concurrent_sagas_in_separate_tasks_do_not_mix(
    sagacity: Sagacity, async_tools: AsyncTools
) -> None:
    tools = sagacity.wrap(async_tools)

    async def one(saga_id: str) -> Any:
        async def work() -> None:
            for i in range(5):
                await tools.book(f"{saga_id}-{i}")

        return await sagacity.saga_async(saga_id, work)

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(one(f"s{i}") for i in range(8))))

    results = asyncio.run(main())
    assert all(r.status is SagaStatus.COMPLETED for r in results)
    for i in range(8):
        entries = sagacity.journal.entries(f"s{i}")
        payloads = [e.payload for e in only(entries, E.INTENT)]
        assert payloads == [f'{{"ref":"s{i}-{n}"}}' for n in range(5)]
        assert verify(entries).ok


def test_nested_async_saga_is_refused(sagacity: Sagacity) -> None:
    async def inner() -> None:
        await sagacity.saga_async("inner", lambda: asyncio.sleep(0))

    result = asyncio.run(sagacity.saga_async("outer", inner))
    assert result.status is SagaStatus.COMPENSATED
    assert isinstance(result.exception, NestedSagaError)
    assert sagacity.journal.entries("inner") == ()


def test_sync_tools_called_via_to_thread_journal_into_the_saga(
    sagacity: Sagacity, ledger: Ledger
) -> None:
    tools = sagacity.wrap(OrderTools(ledger))

    async def work() -> None:
        await asyncio.gather(
            *(asyncio.to_thread(tools.reserve_inventory, "p", i) for i in range(4))
        )

    result = asyncio.run(sagacity.saga_async("threads", work))
    assert result.status is SagaStatus.COMPLETED
    assert len(only(sagacity.journal.entries("threads"), E.EXECUTED)) == 4


def test_cancelled_async_tool_is_journaled_failed(sagacity: Sagacity) -> None:
    class Slow:
        @compensable(reversibility=Reversibility.READ)
        async def slow(self) -> None:
            await asyncio.sleep(10)

    tools = sagacity.wrap(Slow())

    async def work() -> None:
        task = asyncio.create_task(tools.slow())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(sagacity.saga_async("cancel", work))
    failed = only(sagacity.journal.entries("cancel"), E.FAILED)
    assert [f.error for f in failed] == ["CancelledError"]
