"""The demo's shop tools and scripted agent, against real PostgreSQL (in-memory journal).

The three sagas the demo shows, run in one process with inline compensation: what the
services do across processes is exercised by the demo itself.
"""

from __future__ import annotations

import pytest

from sagacity import EventType, Sagacity, SagaStatus
from sagacity.demo import tools
from sagacity.demo.agent import run_scenario
from sagacity.errors import InvalidArgumentError, PayloadMismatchError

pytestmark = pytest.mark.postgres

E = EventType


@pytest.fixture
def shop_db(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SAGACITY_DEMO_DATABASE_URL", pg_dsn)
    tools.prepare(pg_dsn)
    return pg_dsn


def test_the_confirmed_order_waits_for_approval_then_sends_exactly_once(shop_db: str) -> None:
    sagacity = Sagacity()
    result = run_scenario(sagacity, "confirmed", "order-ok")

    assert result.status is SagaStatus.AWAITING_APPROVAL
    before = tools.snapshot(shop_db)
    assert before.stock == {"p-1": 8, "p-2": 5}
    assert before.orders == {"order-1": "placed"}
    assert before.emails == []
    [request] = sagacity.pending_approvals("order-ok")
    assert request.payload == '{"order_id":"order-1","email":"customer@example.com"}'

    sagacity.approve("order-ok", request.seq, "manager@example.com")
    resumed = sagacity.resume_saga("order-ok", request.seq, request.payload)

    assert resumed.status is SagaStatus.COMPLETED
    assert tools.snapshot(shop_db).emails == [("order-1", "customer@example.com")]


def test_the_failed_order_is_compensated_and_the_stock_restored(shop_db: str) -> None:
    sagacity = Sagacity()
    result = run_scenario(sagacity, "failed", "order-bad")

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "discontinued" in result.error
    after = tools.snapshot(shop_db)
    assert after.stock == {"p-1": 10, "p-2": 5}
    assert after.reservations == {"res-1": "released"}
    assert after.orders == {}
    assert [e.event_type for e in sagacity.entries("order-bad")] == [
        E.SAGA_OPENED,
        E.INTENT,
        E.EXECUTED,
        E.INTENT,
        E.FAILED,
        E.COMPENSATION_INTENT,
        E.COMPENSATED,
        E.SAGA_ENDED,
    ]


def test_the_stale_approval_attack_is_refused_and_nothing_is_wired(shop_db: str) -> None:
    sagacity = Sagacity()
    assert run_scenario(sagacity, "wire", "pay-1").status is SagaStatus.AWAITING_APPROVAL
    [request] = sagacity.pending_approvals("pay-1")
    assert request.payload == '{"amount":"100","to":"alice"}'
    sagacity.approve("pay-1", request.seq, "manager@example.com")

    with pytest.raises(PayloadMismatchError):
        sagacity.resume_saga("pay-1", request.seq, '{"amount":"999999","to":"mallory"}')

    assert tools.snapshot(shop_db).wires == []
    assert E.RESUME_REFUSED in [e.event_type for e in sagacity.entries("pay-1")]


def test_an_unknown_scenario_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown scenario"):
        run_scenario(Sagacity(), "nope", "s")
