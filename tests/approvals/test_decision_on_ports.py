"""The approvals service decides through the request store's port (its unit of work), so it
runs on the in-memory fakes as on PostgreSQL: no raw connection below the port."""

from __future__ import annotations

import threading
import time

from sagacity import InMemoryJournal, Reversibility, Sagacity, SagaStatus, compensable
from sagacity.consumers.approvals import ApprovalService, Principal
from sagacity.errors import DecisionInProgressError
from sagacity.ports import RowState
from sagacity.testing import InMemoryRequestStore

OMAR = Principal(name="omar", tools=frozenset({"send_wire_transfer"}))


class Wire:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        return f"sent {amount} to {to}"


def _requested(
    saga_id: str, clock: list[int] | None = None
) -> tuple[ApprovalService, InMemoryRequestStore, int]:
    journal = InMemoryJournal()
    agent = Sagacity(journal=journal)
    wire = agent.wrap(Wire())
    result = agent.saga(saga_id, lambda: wire.send_wire_transfer("100", "alice"))
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    desk = (
        Sagacity(journal=journal, compensation="delegated")
        if clock is None
        else Sagacity(
            journal=journal, compensation="delegated", approval_ttl=60, clock=lambda: clock[0]
        )
    )
    desk.wrap(Wire())
    store = InMemoryRequestStore()
    return ApprovalService(desk, store, lock_timeout_s=0.3), store, result.awaiting_seq


def test_a_decision_runs_on_the_in_memory_request_store() -> None:
    service, store, seq = _requested("on-ports")
    row = service.get(OMAR, "on-ports", seq)  # materialised through the unit of work
    assert row.state is RowState.PENDING
    decided = service.reject(OMAR, "on-ports", seq, reason="not today")
    assert decided.request.state is RowState.REJECTED
    assert decided.result is not None
    assert decided.result.status is SagaStatus.COMPENSATION_PENDING
    assert store.get("on-ports", seq) == decided.request  # folded before the lock went


def test_a_request_another_decision_holds_is_refused_as_in_progress() -> None:
    service, store, seq = _requested("held")
    service.materialise("held")
    out: list[BaseException] = []

    def decide() -> None:
        try:
            service.reject(OMAR, "held", seq, reason="racing")
        except BaseException as exc:
            out.append(exc)

    with store.deciding() as unit:
        assert unit.get("held", seq, lock=True) is not None
        racing = threading.Thread(target=decide)
        racing.start()
        racing.join(30)
    assert len(out) == 1
    assert isinstance(out[0], DecisionInProgressError)
    row = store.get("held", seq)
    assert row is not None
    assert row.state is RowState.PENDING  # nothing was journaled by the refused decision
    assert service.reject(OMAR, "held", seq, reason="now").request.state is RowState.REJECTED


def test_the_sweep_expires_through_the_unit_of_work() -> None:
    clock = [time.time_ns() // 1000]  # the desk's clock, from the request's time on
    service, store, seq = _requested("lapsing", clock)
    service.materialise("lapsing")
    assert service.sweep() == []  # not yet due
    clock[0] += 61_000_000
    assert service.sweep() == [("lapsing", seq)]
    row = store.get("lapsing", seq)
    assert row is not None
    assert row.state is RowState.EXPIRED
