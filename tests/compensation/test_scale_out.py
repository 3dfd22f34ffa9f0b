"""Two instances sharing the partitions, a rebalance mid-compensation, and SIGTERM."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from sagacity import EventType, SagaStatus, verify
from sagacity.producer import KafkaJournal
from tests.compensation.conftest import Lane
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _wait_for_calls(lane: Lane, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(lane.calls()) < count:
        assert time.monotonic() < deadline, lane.calls()
        time.sleep(0.02)


@pytest.mark.slow
def test_a_rebalance_mid_compensation_never_compensates_a_step_twice(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane(partitions=4)
    agent = lane.agent()
    sagas = [f"rebalance-{n}-{uuid.uuid4().hex[:6]}" for n in range(12)]
    for n, saga in enumerate(sagas):
        fail_after(
            agent,
            saga,
            ("charge", {"order": f"r{n}", "amount": n}),
            ("reserve", {"order": f"r{n}", "item": "desk"}),
            ("ship", {"order": f"r{n}"}),
        )
    first = lane.start("--concurrency", "1", SVC_TOOLS_SLOW_S="0.5")
    _wait_for_calls(lane, 2)
    # A second instance joins while the first is in the middle of sagas.
    second = lane.start("--concurrency", "1", SVC_TOOLS_SLOW_S="0.5")
    results = [agent.wait_for_outcome(saga, timeout=90) for saga in sagas]
    assert all(r.status is SagaStatus.COMPENSATED for r in results), [r.summary() for r in results]
    calls = Counter(lane.calls())
    effects = Counter(lane.effects())
    assert len(calls) == 3 * len(sagas)
    # Not even the non-idempotent release ran twice: the revoked instance finished its step
    # in flight and stopped; the new owner resumed from the chain.
    assert set(calls.values()) == {1}
    assert calls == effects
    reader = KafkaJournal(lane.bootstrap, topic=lane.topic)
    lane.journals.append(reader)
    writers: set[str] = set()
    shared = 0
    for saga in sagas:
        read = reader.read(saga)
        assert verify(read.entries, saga_id=saga).ok
        assert not read.forks, read.forks
        assert not [e for e in read.entries if e.event_type is E.SUSPECT]
        mine = {
            e.actor or ""
            for e in read.entries
            if e.event_type in (E.COMPENSATION_INTENT, E.COMPENSATED)
        }
        shared += len(mine) > 1
        writers |= mine
    assert len(writers) == 2, writers  # both instances compensated
    print(f"sagas whose compensation moved between instances mid-way: {shared}")
    revoked = [r for r in first.records() if r["msg"].startswith("revoking partitions")]
    assert revoked, "the first instance never gave up partitions"
    assert first.terminate() == 0
    assert second.terminate() == 0


def test_sigterm_finishes_the_step_in_flight_and_exits_zero(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane(partitions=1)
    agent = lane.agent()
    saga = f"term-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("charge", {"order": "t", "amount": 9}),
        ("reserve", {"order": "t", "item": "sofa"}),
        ("ship", {"order": "t"}),
    )
    service = lane.start(SVC_TOOLS_SLOW_S="1.5")
    _wait_for_calls(lane, 1)
    asked = time.monotonic()
    assert service.terminate(timeout=30) == 0
    assert time.monotonic() - asked < 10
    chain = list(agent.entries(saga))
    seq = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
    after = [e for e in chain if e.ref_seq in seq.values() and e.event_type is not E.EXECUTED]
    # The undo in flight (ship, newest first) finished and was journaled; nothing else began.
    assert [(e.event_type, e.ref_seq) for e in after] == [
        (E.COMPENSATION_INTENT, seq["ship"]),
        (E.COMPENSATED, seq["ship"]),
    ]
    assert lane.calls() == [(saga, seq["ship"], "ship")]
    # A restart resumes from the chain and finishes.
    lane.start()
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATED
    assert Counter(lane.effects()) == Counter(
        {(saga, seq[t], t): 1 for t in ("charge", "reserve", "ship")}
    )
