"""No compensation twice across round trips, and no rollback on a recovered error (real Kafka,
Postgres, the compensation service in its own process; docs/adr/0026-effects-and-refusals.md).

The two failure modes frameworks that tried compensation ran into: rollback fired on an error
the agent recovered from, and compensation ran twice when a request came round again — here a
request delivered again (a service of a new consumer group reads the whole topic), a saga's
compensation asked for again by an operator's undo, and a cancelled run.  Undo calls are
counted in the tools' own table, never in logs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sagacity import EventType, Sagacity, SagaStatus, verify
from sagacity.chain._grammar import check
from sagacity.cli import main
from sagacity.signing._operator_signature import OperatorSigner, generate_key
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _call(agent: Sagacity, name: str, **kwargs: Any) -> Any:
    tool = agent.registry.get(name)
    assert tool is not None
    return tool.wrapped(**kwargs)


def _failed_saga(agent: Sagacity, saga: str) -> None:
    def work() -> None:
        _call(agent, "charge", order=saga, amount=30)
        _call(agent, "reserve", order=saga, item="lamp")
        raise RuntimeError("the order service went away")

    assert agent.saga(saga, work).status is SagaStatus.COMPENSATION_PENDING


def _undo_calls(lane: Lane, saga: str) -> list[str]:
    return sorted(tool for s, _seq, tool in lane.calls() if s == saga)


@pytest.fixture
def operator(tmp_path: Path) -> tuple[OperatorSigner, Path]:
    path = tmp_path / "operator.pem"
    return generate_key(path), path


def test_a_request_delivered_again_undoes_nothing_twice(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane(partitions=1)  # one partition: a later saga is handled after the earlier
    first = lane.start()
    agent = lane.agent()
    saga = f"twice-{uuid.uuid4().hex[:8]}"
    _failed_saga(agent, saga)
    assert agent.wait_for_outcome(saga, timeout=60).status is SagaStatus.COMPENSATED
    assert _undo_calls(lane, saga) == ["charge", "reserve"]
    first.kill()

    # Every request of the topic comes round again: a new consumer group reads it from its start.
    again = lane.start(SAGACITY_COMPENSATION_GROUP=f"again-{uuid.uuid4().hex[:8]}")
    sentinel = f"after-{uuid.uuid4().hex[:8]}"
    _failed_saga(agent, sentinel)
    assert agent.wait_for_outcome(sentinel, timeout=60).status is SagaStatus.COMPENSATED
    assert again.proc.poll() is None
    assert _undo_calls(lane, saga) == ["charge", "reserve"]  # not one undo more
    chain = list(agent.entries(saga))
    assert [e.event_type for e in chain].count(E.COMPENSATION_INTENT) == 2
    assert verify(chain, saga_id=saga).ok
    assert check(chain) == []


def test_an_undo_asked_for_again_after_the_saga_was_compensated_undoes_nothing_twice(
    make_lane: Callable[..., Lane], operator: tuple[OperatorSigner, Path]
) -> None:
    signer, key = operator
    lane = make_lane()
    service = lane.start(SAGACITY_OPERATOR_PUBLIC_KEY=signer.public_hex)
    agent = lane.agent()
    saga = f"undo-{uuid.uuid4().hex[:8]}"
    _failed_saga(agent, saga)
    assert agent.wait_for_outcome(saga, timeout=60).status is SagaStatus.COMPENSATED

    env = lane.env(SAGACITY_OPERATOR_SIGNING_KEY=str(key))
    undo = CliRunner().invoke(
        main,
        ["saga", "undo", "--saga", saga, "--reason", "the customer cancelled"],
        env=env,
    )
    assert undo.exit_code == 0, undo.output
    assert "nothing left to undo" in undo.output
    assert "undone already: seq" in undo.output
    assert "journaled COMPENSATION_REQUESTED" in undo.output
    # The service acts on the signed request: the saga ends again, nothing is undone twice.
    _wait(lambda: len(_ends(agent, saga)) == 2, service)
    assert _ends(agent, saga)[-1].result == "COMPENSATED"
    assert _undo_calls(lane, saga) == ["charge", "reserve"]


def test_a_cancelled_run_is_compensated_once(make_lane: Callable[..., Lane]) -> None:
    """The agent's cancellation (a kill switch): the run's completed steps are undone once,
    and a request delivered again after that undoes nothing more."""
    lane = make_lane(partitions=1)
    service = lane.start()
    agent = lane.agent()
    saga = f"cancel-{uuid.uuid4().hex[:8]}"
    started = asyncio.Event()

    async def work() -> None:
        await asyncio.to_thread(_call, agent, "charge", order=saga, amount=30)
        started.set()
        await asyncio.sleep(3600)  # the agent thinks; the user presses stop

    async def run() -> None:
        task = asyncio.create_task(agent.saga_async(saga, work))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert agent.wait_for_outcome(saga, timeout=60).status is SagaStatus.COMPENSATED
    request = next(e for e in agent.entries(saga) if e.event_type is E.COMPENSATION_REQUESTED)
    assert "its run was cancelled" in (request.error or "")
    service.kill()
    again = lane.start(SAGACITY_COMPENSATION_GROUP=f"again-{uuid.uuid4().hex[:8]}")
    sentinel = f"after-{uuid.uuid4().hex[:8]}"
    _failed_saga(agent, sentinel)
    assert agent.wait_for_outcome(sentinel, timeout=60).status is SagaStatus.COMPENSATED
    assert again.proc.poll() is None
    assert _undo_calls(lane, saga) == ["charge"]


def _ends(agent: Sagacity, saga: str) -> list[Any]:
    return [e for e in agent.entries(saga) if e.event_type is E.SAGA_ENDED]


def _wait(done: Callable[[], bool], service: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not done in {timeout}s:\n{service.logs()}")
        time.sleep(0.1)


def test_a_recovered_error_rolls_nothing_back(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane()
    agent = lane.agent()
    saga = f"recovered-{uuid.uuid4().hex[:8]}"
    attempts: list[str] = []

    def flaky_ship() -> None:
        # A failure the agent recovers from: the same tool, called again, succeeds.
        tool = agent.registry.get("ship")
        assert tool is not None
        attempts.append("ship")
        if len(attempts) == 1:
            from sagacity.tools._tool import journaled_call

            def broken() -> str:
                raise RuntimeError("carrier timeout")

            with pytest.raises(RuntimeError):
                journaled_call(agent, tool.definition, lambda: {"order": saga}, broken)
        _call(agent, "ship", order=saga)

    def work() -> None:
        _call(agent, "charge", order=saga, amount=30)
        flaky_ship()

    result = agent.saga(saga, work)
    assert result.status is SagaStatus.COMPLETED
    chain = list(agent.entries(saga))
    kinds = [e.event_type for e in chain]
    assert E.FAILED in kinds
    assert E.COMPENSATION_REQUESTED not in kinds
    executed = [e for e in chain if e.event_type is E.EXECUTED and e.tool == "ship"]
    failed = next(e for e in chain if e.event_type is E.FAILED)
    assert executed[0].attributes["recovers"] == str(failed.seq)
    assert verify(chain, saga_id=saga).ok
    assert check(chain) == []
