"""Two journals on one claims database: the same saga id on two topics, each undone once.

The docs allow journals (topics) to share one database.  A claim of one journal's step must
never be taken as another's: the same saga id on the other topic would otherwise find the
first one's ``COMPENSATED`` claim, skip its own undo and journal ``COMPENSATED`` anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
import pytest

from sagacity import EventType, SagaStatus
from tests.compensation.conftest import Lane
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def _calls_by_process(dsn: str) -> dict[int, list[tuple[str, int, str]]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT pid, saga_id, seq, tool FROM undo_calls ORDER BY id").fetchall()
    out: dict[int, list[tuple[str, int, str]]] = {}
    for pid, saga, seq, tool in rows:
        out.setdefault(int(pid), []).append((str(saga), int(seq), str(tool)))
    return out


def test_the_same_saga_id_on_two_topics_sharing_one_database_is_undone_on_each(
    make_lane: Callable[..., Lane],
) -> None:
    first = make_lane(partitions=1)
    second = make_lane(partitions=1)
    second.dsn = first.dsn  # one claims database (and one table of undo calls) for both
    services = [first.start(), second.start()]
    saga = f"order-{uuid.uuid4().hex[:8]}"
    for lane in (first, second):
        agent = lane.agent()
        fail_after(agent, saga, ("reserve", {"order": "o1", "item": "lamp"}))
        result = agent.wait_for_outcome(saga, timeout=60)
        assert result.status is SagaStatus.COMPENSATED, result.summary()
        chain = list(agent.entries(saga))
        assert [e.event_type for e in chain].count(EventType.COMPENSATED) == 1
    step = next(e.seq for e in chain if e.event_type is EventType.EXECUTED)
    calls = _calls_by_process(first.dsn)
    # Each service called its own journal's undo, once: none took the other's claim for its own.
    assert {service.proc.pid for service in services} == set(calls), calls
    for service in services:
        assert calls[service.proc.pid] == [(saga, step, "reserve")]
    with psycopg.connect(first.dsn) as conn:
        claims = conn.execute(
            "SELECT count(*), count(DISTINCT journal) FROM sagacity_compensation_claims"
            " WHERE saga_id = %s",
            (saga,),
        ).fetchone()
    assert claims == (2, 2)
    for service in services:
        assert service.terminate() == 0
