"""The compensation service end to end, in its own process, on the real broker and Postgres."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sagacity import EventType, Sagacity, SagaStatus, verify
from sagacity.producer import KafkaJournal
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def fail_after(sagacity: Sagacity, saga: str, *calls: tuple[str, dict[str, object]]) -> None:
    """Run a saga that makes ``calls`` then raises: delegated, it ends COMPENSATION_PENDING."""

    def work() -> None:
        for name, kwargs in calls:
            tool = sagacity.registry.get(name)
            assert tool is not None
            tool.wrapped(**kwargs)
        raise RuntimeError("payment provider down")

    result = sagacity.saga(saga, work)
    assert result.status is SagaStatus.COMPENSATION_PENDING


def test_compensates_in_reverse_order_and_journals_every_outcome(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    service = lane.start()
    agent = lane.agent()
    saga = f"order-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("lookup", {"order": "o1"}),
        ("charge", {"order": "o1", "amount": 30}),
        ("reserve", {"order": "o1", "item": "lamp"}),
        ("ship", {"order": "o1"}),
    )
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATED
    chain = list(agent.entries(saga))
    assert verify(chain, saga_id=saga).ok
    executed = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
    assert result.compensated == tuple(sorted(executed[t] for t in ("charge", "reserve", "ship")))
    # Undone newest first, READ skipped; each undo written to Postgres once.
    assert lane.calls() == [
        (saga, executed["ship"], "ship"),
        (saga, executed["reserve"], "reserve"),
        (saga, executed["charge"], "charge"),
    ]
    assert lane.effects() == lane.calls()
    ended = next(i for i, e in enumerate(chain) if e.event_type is E.SAGA_ENDED)
    tail = chain[ended + 1 :]
    assert [(e.event_type, e.ref_seq) for e in tail] == [
        (E.SAGA_OPENED, None),
        (E.COMPENSATION_INTENT, executed["ship"]),
        (E.COMPENSATED, executed["ship"]),
        (E.COMPENSATION_INTENT, executed["reserve"]),
        (E.COMPENSATED, executed["reserve"]),
        (E.COMPENSATION_INTENT, executed["charge"]),
        (E.COMPENSATED, executed["charge"]),
        (E.SAGA_ENDED, None),
    ]
    assert chain[ended].result == "COMPENSATION_PENDING"
    assert tail[-1].result == "COMPENSATED"
    assert tail[-1].error == "RuntimeError: payment provider down"
    assert all(e.actor is not None and e.actor.startswith("sagacity-compensation/") for e in tail)
    # The service took the saga over for the run (one confirmed SAGA_OPENED) and handed it
    # back with its SAGA_ENDED.
    assert tail[0].actor == f"sagacity-compensation/{lane.group}"
    assert "3 step(s) undone" in result.summary()
    assert service.metric("sagacity_compensation_sagas_total", status="COMPENSATED") == 1
    assert service.metric("sagacity_compensation_steps_total", outcome="compensated") == 3
    assert service.get("/healthz")[0] == 200
    assert service.metric("sagacity_compensation_duration_seconds_count") == 3
    deadline = time.monotonic() + 10
    lag = [line for line in service.get("/metrics")[1].splitlines() if "consumer_lag{" in line]
    while (not lag or any(not line.endswith(" 0.0") for line in lag)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
        lag = [x for x in service.get("/metrics")[1].splitlines() if "consumer_lag{" in x]
    assert len(lag) == 3, lag  # one gauge per partition, all caught up
    assert all(line.endswith(" 0.0") for line in lag), lag
    logged = [r for r in service.records() if r.get("saga_id") == saga]
    assert any("saga compensation ended" in r["msg"] for r in logged)
    assert service.terminate() == 0


def test_wait_for_outcome_times_out_without_a_service(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane()
    agent = lane.agent()
    saga = f"order-{uuid.uuid4().hex[:8]}"
    fail_after(agent, saga, ("charge", {"order": "o2", "amount": 5}))
    from sagacity.errors import OutcomeTimeoutError

    with pytest.raises(OutcomeTimeoutError):
        agent.wait_for_outcome(saga, timeout=0.5)
    # A service started later picks the request up from the topic.
    lane.start()
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATED
    assert len(lane.effects()) == 1


def _reader_journal(lane: Lane) -> KafkaJournal:
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic)
    lane.journals.append(journal)
    return journal


def test_rejected_and_refused_resumes_are_compensated_by_the_service(
    make_lane: Callable[..., Lane], approvals_key: Any
) -> None:
    lane = make_lane()
    lane.start()
    agent = lane.agent(decision_signer=approvals_key)

    def gated(saga: str) -> int:
        def work() -> None:
            for name, kwargs in (
                ("charge", {"order": saga, "amount": 7}),
                ("wire", {"order": saga, "amount": 700}),
            ):
                tool = agent.registry.get(name)
                assert tool is not None
                tool.wrapped(**kwargs)

        result = agent.saga(saga, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        return result.awaiting_seq

    rejected = f"reject-{uuid.uuid4().hex[:8]}"
    seq = gated(rejected)
    pending = agent.reject(rejected, seq, "bob", reason="too much")
    assert pending.status is SagaStatus.COMPENSATION_PENDING
    final = agent.wait_for_outcome(rejected, timeout=30)
    assert final.status is SagaStatus.REJECTED
    assert len(final.compensated) == 1

    refused = f"refused-{uuid.uuid4().hex[:8]}"
    seq = gated(refused)
    agent.approve(refused, seq, "alice")
    from sagacity.errors import PayloadMismatchError

    with pytest.raises(PayloadMismatchError):
        agent.resume_saga(refused, seq, '{"order":"x","amount":7000}')
    final = agent.wait_for_outcome(refused, timeout=30)
    assert final.status is SagaStatus.COMPENSATED
    requests = [e for e in agent.entries(refused) if e.event_type is E.COMPENSATION_REQUESTED]
    assert [r.attributes["reason"] for r in requests] == ["RESUME_REFUSED"]
    undone = {(saga, tool) for saga, _seq, tool in lane.effects()}
    assert undone == {(rejected, "charge"), (refused, "charge")}
