"""The claims database out of reach mid-compensation: the service waits it out and retries.

An undo that was never called because its claim could not be written is no failure of the
step, and an undo that ran is not reported failed because its claim could not be updated.
Real Kafka and PostgreSQL; the outage is a real cut of the service's database connections.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import EntryDraft, EventType, SagaStatus, verify
from sagacity.chain import link
from sagacity.consumers.compensation._invoker import ClaimingInvoker
from sagacity.entries._events import GENESIS_HASH
from sagacity.errors import CompensationInterruptedError
from sagacity.postgres import PostgresClaimStore
from sagacity.undo._compensation import CompensationCall
from tests.compensation.conftest import Lane, free_port
from tests.compensation.netcut import Relay
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


@pytest.fixture
def relay(postgres_dsn: str) -> Iterator[Relay]:
    params = conninfo_to_dict(postgres_dsn)
    relay = Relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    yield relay
    relay.close()


def _through(dsn: str, relay: Relay) -> str:
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=str(relay.port))
    return make_conninfo(**params)


def test_an_outage_mid_run_is_waited_out_and_each_undo_runs_once(
    make_lane: Callable[..., Lane], relay: Relay
) -> None:
    lane = make_lane()
    # The undos' own effects go straight to the database; the service's claims go through
    # the relay. Each undo sleeps 3 s after its effect: the cut falls inside the first one.
    service = lane.start(SAGACITY_DATABASE_URL=_through(lane.dsn, relay), SVC_TOOLS_SLOW_S="3")
    agent = lane.agent()
    saga = f"cut-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("charge", {"order": "o1", "amount": 30}),
        ("reserve", {"order": "o1", "item": "lamp"}),
    )
    deadline = time.monotonic() + 60
    while not lane.calls():
        assert time.monotonic() < deadline, service.logs()
        time.sleep(0.05)
    relay.cut()
    time.sleep(6)  # the first undo returns, and the second is due, while the cut lasts
    relay.restore()
    result = agent.wait_for_outcome(saga, timeout=90)
    assert result.status is SagaStatus.COMPENSATED, service.logs()
    chain = list(agent.entries(saga))
    assert verify(chain, saga_id=saga).ok
    executed = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
    # Each undo took effect once, newest step first.
    assert lane.effects() == [
        (saga, executed["reserve"], "reserve"),
        (saga, executed["charge"], "charge"),
    ]
    # Each step's last word is COMPENSATED; nothing reports a database error as the undo's.
    outcomes: dict[int | None, list[Any]] = {}
    for entry in chain:
        if entry.event_type in (E.COMPENSATED, E.COMPENSATION_FAILED):
            outcomes.setdefault(entry.ref_seq, []).append(entry)
    assert {seq: events[-1].event_type for seq, events in outcomes.items()} == {
        executed["reserve"]: E.COMPENSATED,
        executed["charge"]: E.COMPENSATED,
    }
    assert all("database" not in (e.error or "") for e in chain if e.ref_seq in outcomes)
    assert outcomes[executed["reserve"]][-1].result is not None
    logged = [r["msg"] for r in service.records() if r.get("saga_id") == saga]
    # The cut did interrupt the run: the first undo's claim update failed, and the service
    # retried rather than end the saga.
    assert any("could not be recorded on its claim" in m for m in logged), logged
    assert any("compensation interrupted, retrying" in m for m in logged), logged
    assert relay.refused > 0
    assert service.terminate() == 0


def test_a_claim_that_cannot_be_written_stops_before_the_undo() -> None:
    calls: list[int] = []
    step = link(
        EntryDraft(saga_id="s-unreachable", event_type=E.EXECUTED, tool="charge"),
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    call = CompensationCall(
        step=step,
        target="refund",
        function=lambda: calls.append(1),
        args=(),
        kwargs={},
        payload=None,
    )
    # Nothing listens there: psycopg's connection is refused, as during a database restart.
    claims = PostgresClaimStore(
        f"postgresql://postgres@127.0.0.1:{free_port()}/sagacity?connect_timeout=2",
        instance="test",
        journal="kafka:cluster/topic",
    )
    try:
        with pytest.raises(CompensationInterruptedError, match="was not called") as raised:
            ClaimingInvoker(claims, timeout_s=5)(call)
    finally:
        claims.close()
    assert calls == []
    assert raised.value.saga_id == "s-unreachable"
    assert raised.value.seq == 1
    assert "claims database" in str(raised.value)
