"""The compensation service end to end, in its own process, on the real broker and Postgres."""

from __future__ import annotations

import uuid
from collections.abc import Callable

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
