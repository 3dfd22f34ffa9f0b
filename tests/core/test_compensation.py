"""The compensation runner: from the chain alone, exactly once, partial cleanup over none."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    CompensationRunner,
    EntryDraft,
    EventType,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    Undo,
    compensable,
    compensation,
    verify,
)

from .conftest import Ledger, OrderTools, only

E = EventType


def _fail(sagacity: Sagacity, saga_id: str, *calls: Any) -> Any:
    def work() -> None:
        for call in calls:
            call()
        raise RuntimeError("stop")

    return sagacity.saga(saga_id, work)


def test_context_carries_arguments_result_and_idempotency_key(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    _fail(sagacity, "ctx", lambda: tools.charge_card(25, currency="USD"))
    (context,) = ledger.contexts
    executed = only(sagacity.journal.entries("ctx"), E.EXECUTED)[0]
    assert context.saga_id == "ctx"
    assert context.seq == executed.seq
    assert context.tool == "charge_card"
    assert context.arguments == {"amount": 25, "currency": "USD"}
    assert context.payload == '{"amount":25,"currency":"USD"}'
    assert context.result == {"charge_id": "ch_25", "amount": 25}
    assert context.result_text == '{"charge_id":"ch_25","amount":25}'
    assert context.idempotency_key == f"ctx:{executed.seq}"
    assert context.undo_arguments is None
    with pytest.raises(AttributeError):
        context.seq = 3  # type: ignore[misc]


def test_failing_compensation_does_not_stop_the_rest(
    sagacity: Sagacity, tools: Any, order_tools: OrderTools, ledger: Ledger
) -> None:
    order_tools.fail_release = True
    result = _fail(
        sagacity,
        "partial",
        lambda: tools.reserve_inventory("p", 1),
        lambda: tools.charge_card(5),
    )
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert ledger.names()[-2:] == ["refund", "release_inventory"]
    entries = sagacity.journal.entries("partial")
    failed = only(entries, E.COMPENSATION_FAILED)
    assert len(failed) == 1
    assert failed[0].error == "RuntimeError: inventory service down"
    assert failed[0].attributes["cause"] == "error"
    assert [d.tool for d in result.dirty] == ["reserve_inventory"]
    assert result.dirty[0].seq == failed[0].ref_seq
    assert len(only(entries, E.COMPENSATED)) == 1
    assert entries[-1].result == "COMPENSATION_FAILED"


def test_each_undo_is_preceded_by_a_compensation_intent(sagacity: Sagacity, tools: Any) -> None:
    _fail(sagacity, "ci", lambda: tools.reserve_inventory("p", 1))
    entries = list(sagacity.journal.entries("ci"))
    types = [e.event_type for e in entries]
    i = types.index(E.COMPENSATION_INTENT)
    assert types[i + 1] is E.COMPENSATED
    assert entries[i].ref_seq == entries[i + 1].ref_seq
    assert entries[i].attributes["compensation"] == "release_inventory"


def test_read_steps_are_never_compensated(sagacity: Sagacity, tools: Any, ledger: Ledger) -> None:
    result = _fail(sagacity, "read", lambda: tools.lookup_stock("p"))
    assert result.status is SagaStatus.COMPENSATED
    assert result.compensated == ()
    assert only(sagacity.journal.entries("read"), E.COMPENSATION_INTENT) == []


def test_running_compensation_twice_never_undoes_twice(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    _fail(sagacity, "twice", lambda: tools.charge_card(9))
    assert ledger.names().count("refund") == 1
    again = sagacity.compensate("twice")
    assert again.status is SagaStatus.COMPENSATED
    assert again.compensated == ()
    assert ledger.names().count("refund") == 1  # no double refund
    assert verify(sagacity.journal.entries("twice")).ok


def test_intent_without_outcome_is_suspect_and_not_compensated(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    sagacity.saga("crash", lambda: tools.reserve_inventory("p", 1))
    # A writer died between INTENT and EXECUTED of a second call.
    journal.append(
        EntryDraft(
            saga_id="crash",
            event_type=E.INTENT,
            tool="charge_card",
            payload='{"amount":5,"currency":"EUR"}',
        )
    )
    result = sagacity.compensate("crash")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.tool for s in result.suspects] == ["charge_card"]
    assert "refund" not in ledger.names()  # never compensated blindly
    assert "release_inventory" in ledger.names()  # the known step still is
    suspects = only(journal.entries("crash"), E.SUSPECT)
    assert len(suspects) == 1
    assert suspects[0].attributes["phase"] == "call"
    # A second run reports it again but journals it once.
    assert sagacity.compensate("crash").suspects == result.suspects
    assert len(only(journal.entries("crash"), E.SUSPECT)) == 1


def _dangling_compensation_intent(
    sagacity: Sagacity, journal: InMemoryJournal, saga_id: str, call: Any
) -> int:
    sagacity.saga(saga_id, call)
    executed = only(journal.entries(saga_id), E.EXECUTED)[-1]
    journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.COMPENSATION_INTENT,
            tool=executed.tool,
            attributes={"ref_seq": str(executed.seq)},
        )
    )
    return executed.seq


def test_dangling_compensation_intent_is_retried_only_when_idempotent(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    # refund is declared idempotent: retried.
    seq = _dangling_compensation_intent(sagacity, journal, "idem", lambda: tools.charge_card(3))
    result = sagacity.compensate("idem")
    assert result.status is SagaStatus.COMPENSATED
    assert result.compensated == (seq,)
    assert ledger.names().count("refund") == 1

    # release_inventory is not: the step is SUSPECT, for a person.
    seq = _dangling_compensation_intent(
        sagacity, journal, "not-idem", lambda: tools.reserve_inventory("p", 1)
    )
    result = sagacity.compensate("not-idem")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [seq]
    assert "release_inventory" not in ledger.names()
    suspect = only(journal.entries("not-idem"), E.SUSPECT)[0]
    assert suspect.attributes["phase"] == "compensation"
    assert suspect.ref_seq == seq


def test_a_step_whose_compensation_failed_is_retried_on_the_next_run(
    sagacity: Sagacity, tools: Any, order_tools: OrderTools, ledger: Ledger
) -> None:
    order_tools.fail_release = True
    assert _fail(sagacity, "retry", lambda: tools.reserve_inventory("p", 1)).status is (
        SagaStatus.COMPENSATION_FAILED
    )
    order_tools.fail_release = False
    again = sagacity.compensate("retry")
    assert again.status is SagaStatus.COMPENSATED
    assert ledger.names().count("release_inventory") == 2


class Tickets:
    """Writes that return their own undo (a server that tells you how to put it back)."""

    def __init__(self) -> None:
        self.status = {"T-4003": "pending"}
        self.calls: list[str] = []

    @compensable(reversibility=Reversibility.REVERSIBLE, undo_tools=("update_ticket_status",))
    def update_ticket_status(self, ticket_id: str, status: str) -> dict[str, Any]:
        previous = self.status[ticket_id]
        self.status[ticket_id] = status
        self.calls.append(f"{ticket_id}:{previous}->{status}")
        return {
            "changed": True,
            "ticket_id": ticket_id,
            "status": status,
            "previous_status": previous,
            "undo": {
                "tool": "update_ticket_status",
                "arguments": {"ticket_id": ticket_id, "status": previous},
            },
        }

    @compensable
    def refund_invoice(self, invoice_id: str) -> dict[str, Any]:
        self.calls.append(f"refund {invoice_id}")
        return {"changed": True, "invoice_id": invoice_id, "amount": 39900, "undo": None}

    @compensable(undo_tools=("untag",))
    def tag(self, ticket_id: str, tag: str) -> Undo:
        self.calls.append(f"tag {tag}")
        return Undo(tool="untag", arguments={"ticket_id": ticket_id, "tag": tag})

    @compensable
    def untag(self, ticket_id: str, tag: str) -> str:
        self.calls.append(f"untag {tag}")
        return "untagged"

    @compensable
    def note(self, text: str) -> str:
        return "noted"


def test_write_returning_its_own_undo_is_compensated_with_it(sagacity: Sagacity) -> None:
    tickets = Tickets()
    tools = sagacity.wrap(tickets)
    result = _fail(
        sagacity,
        "tickets",
        lambda: tools.update_ticket_status("T-4003", "closed"),
        lambda: tools.tag("T-4003", "vip"),
    )
    assert result.status is SagaStatus.COMPENSATED
    assert tickets.status == {"T-4003": "pending"}
    assert tickets.calls[-2:] == ["untag vip", "T-4003:closed->pending"]
    executed = only(sagacity.journal.entries("tickets"), E.EXECUTED)
    assert executed[0].attributes["undo"] == "tool"
    assert executed[0].attributes["undo_tool"] == "update_ticket_status"
    assert executed[0].attributes["undo_arguments"] == '{"ticket_id":"T-4003","status":"pending"}'
    assert executed[1].result == '{"tool":"untag","arguments":{"ticket_id":"T-4003","tag":"vip"}}'
    intents = only(sagacity.journal.entries("tickets"), E.COMPENSATION_INTENT)
    assert intents[0].payload == '{"ticket_id":"T-4003","tag":"vip"}'


def test_undo_none_is_journaled_as_no_undo_and_reported_dirty(sagacity: Sagacity) -> None:
    tools = sagacity.wrap(Tickets())
    result = _fail(sagacity, "refund", lambda: tools.refund_invoice("INV-7002"))
    assert result.status is SagaStatus.COMPENSATION_FAILED
    executed = only(sagacity.journal.entries("refund"), E.EXECUTED)[0]
    assert executed.attributes["undo"] == "none"
    failed = only(sagacity.journal.entries("refund"), E.COMPENSATION_FAILED)[0]
    assert failed.attributes["cause"] == "no_undo"
    assert "no undo exists" in (failed.error or "")
    assert [d.tool for d in result.dirty] == ["refund_invoice"]
    # Final: a later run reports it again without journaling it twice.
    assert sagacity.compensate("refund").dirty == result.dirty
    assert len(only(sagacity.journal.entries("refund"), E.COMPENSATION_FAILED)) == 1


def test_step_without_any_declared_undo_is_dirty(sagacity: Sagacity) -> None:
    tools = sagacity.wrap(Tickets())
    result = _fail(sagacity, "note", lambda: tools.note("hello"))
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "no compensation declared" in result.dirty[0].reason


def test_executed_irreversible_step_is_reported_dirty(sagacity: Sagacity, tools: Any) -> None:
    gated = sagacity.saga("irr", lambda: tools.send_confirmation("o1"))
    sagacity.approve("irr", gated.awaiting_seq or 0, "boss")
    sagacity.resume_saga("irr", gated.awaiting_seq or 0, '{"order_id":"o1"}')
    result = sagacity.compensate("irr")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert result.dirty[0].tool == "send_confirmation"
    assert "no undo exists" in result.dirty[0].reason


def test_runner_works_from_the_chain_with_another_registry(ledger: Ledger) -> None:
    """The compensation service's case: another process, same tools, only the chain."""
    journal = InMemoryJournal()
    producer = Sagacity(journal=journal, compensation="delegated")
    order_tools = OrderTools(ledger)
    order_tools.fail_charge = True
    tools = producer.wrap(order_tools)
    producer.saga("svc", lambda: (tools.reserve_inventory("p", 2), tools.charge_card(1)))
    service = Sagacity(journal=journal, writer_id="compensation-service")
    service.wrap(OrderTools(ledger))
    runner = CompensationRunner(journal, service.registry, actor="compensation-service")
    report = runner.run("svc")
    assert report.status is SagaStatus.COMPENSATED
    assert ledger.names()[-1] == "release_inventory"
    assert only(journal.entries("svc"), E.COMPENSATED)[0].actor == "compensation-service"


def test_unregistered_tool_is_dirty_and_retried_once_registered(ledger: Ledger) -> None:
    journal = InMemoryJournal()
    producer = Sagacity(journal=journal, compensation="delegated")
    tools = producer.wrap(OrderTools(ledger))
    producer.saga("unreg", lambda: (tools.reserve_inventory("p", 1), 1 / 0))
    service = Sagacity(journal=journal)
    first = CompensationRunner(journal, service.registry).run("unreg")
    assert first.status is SagaStatus.COMPENSATION_FAILED
    assert "not registered" in first.dirty[0].reason
    service.wrap(OrderTools(ledger))
    second = CompensationRunner(journal, service.registry).run("unreg")
    assert second.status is SagaStatus.COMPENSATED


def test_base_exception_in_a_compensation_is_journaled_and_re_raised(
    sagacity: Sagacity,
) -> None:
    class Stubborn:
        @compensable(by="undo")
        def act(self) -> str:
            return "done"

        @compensation
        def undo(self, context: CompensationContext) -> None:
            raise KeyboardInterrupt

    tools = sagacity.wrap(Stubborn())
    sagacity.saga("stubborn", tools.act)
    with pytest.raises(KeyboardInterrupt):
        sagacity.compensate("stubborn")
    failed = only(sagacity.journal.entries("stubborn"), E.COMPENSATION_FAILED)
    assert failed[0].error == "KeyboardInterrupt"


def test_invoke_hook_wraps_each_call_and_its_errors_are_journaled(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    from sagacity import CompensationCall

    sagacity_delegated = Sagacity(journal=sagacity.journal, compensation="delegated")
    wrapped = sagacity_delegated.wrap(OrderTools(ledger))
    sagacity_delegated.saga(
        "hook", lambda: (wrapped.reserve_inventory("p", 1), wrapped.charge_card(2), 1 / 0)
    )
    seen: list[tuple[str, int, str, bool]] = []

    def invoke(call: CompensationCall) -> Any:
        seen.append((call.target, call.seq, call.idempotency_key, call.idempotent))
        if call.target == "release_inventory":
            raise TimeoutError("compensation took longer than 5s")
        return call.invoke()

    runner = CompensationRunner(sagacity.journal, sagacity_delegated.registry, invoke=invoke)
    report = runner.run("hook")
    executed = only(sagacity.journal.entries("hook"), E.EXECUTED)
    assert seen == [
        ("refund", executed[1].seq, f"hook:{executed[1].seq}", True),
        ("release_inventory", executed[0].seq, f"hook:{executed[0].seq}", False),
    ]
    assert report.status is SagaStatus.COMPENSATION_FAILED
    assert report.dirty[0].reason == "TimeoutError: compensation took longer than 5s"


def test_outcome_is_read_back_from_the_chain(ledger: Ledger) -> None:
    journal = InMemoryJournal()
    agent_side = Sagacity(journal=journal, compensation="delegated")
    order_tools = OrderTools(ledger)
    order_tools.fail_release = True
    tools = agent_side.wrap(order_tools)
    pending = agent_side.saga(
        "readback", lambda: (tools.reserve_inventory("p", 1), tools.charge_card(3), 1 / 0)
    )
    assert pending.status is SagaStatus.COMPENSATION_PENDING
    assert agent_side.outcome("readback") == pending.__class__(
        status=SagaStatus.COMPENSATION_PENDING,
        saga_id="readback",
        error="ZeroDivisionError: division by zero",
    )
    from sagacity.errors import OutcomeTimeoutError

    with pytest.raises(OutcomeTimeoutError):
        agent_side.wait_for_outcome("readback", timeout=0.05, poll_interval=0.01)
    service = Sagacity(journal=journal, writer_id="compensation-service")
    service.wrap(order_tools)
    direct = service.compensate("readback")
    final = agent_side.wait_for_outcome("readback", timeout=1)
    assert final.status is SagaStatus.COMPENSATION_FAILED
    assert final.compensated == direct.compensated
    assert [d.tool for d in final.dirty] == ["reserve_inventory"]
    assert "inventory service down" in final.summary()


def test_wait_for_outcome_async(sagacity: Sagacity, tools: Any) -> None:
    import asyncio

    sagacity.saga("async-wait", lambda: tools.reserve_inventory("p", 1))
    result = asyncio.run(sagacity.wait_for_outcome_async("async-wait", timeout=1))
    assert result.status is SagaStatus.COMPLETED


def test_two_compensators_on_one_saga_undo_each_step_once(ledger: Ledger) -> None:
    from sagacity.errors import CompensationConflictError

    class Racing(InMemoryJournal):
        interlude: Any = None

        def append_after(self, draft: Any, *, after_seq: int, durable: bool = True) -> Any:
            interlude, self.interlude = self.interlude, None
            if interlude is not None:
                interlude()
            return super().append_after(draft, after_seq=after_seq, durable=durable)

    journal = Racing()
    agent = Sagacity(journal=journal, compensation="delegated")
    tools = agent.wrap(OrderTools(ledger))
    agent.saga("two-comp", lambda: (tools.reserve_inventory("p", 1), tools.charge_card(4), 1 / 0))

    class OtherProcess:
        """Another process's connection to the same store (a distinct journal object)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(journal, name)

        def append_after(self, draft: Any, *, after_seq: int, durable: bool = True) -> Any:
            return InMemoryJournal.append_after(journal, draft, after_seq=after_seq)

    other: Any = OtherProcess()
    first, second = Sagacity(journal=journal), Sagacity(journal=journal)
    first.wrap(OrderTools(ledger))
    second.wrap(OrderTools(ledger))
    # The second compensator runs completely between the first one's read and its first act.
    journal.interlude = lambda: CompensationRunner(other, second.registry).run("two-comp")
    with pytest.raises(CompensationConflictError, match="changed while it was being compensated"):
        CompensationRunner(journal, first.registry).run("two-comp")
    assert ledger.names().count("refund") == 1
    assert ledger.names().count("release_inventory") == 1
    assert verify(journal.entries("two-comp")).ok
    # Afterwards a run finds nothing left to do.
    assert CompensationRunner(journal, first.registry).run("two-comp").compensated == ()


def test_a_second_run_in_the_same_process_is_refused(sagacity: Sagacity, tools: Any) -> None:
    from sagacity.errors import CompensationConflictError

    class Reentrant:
        @compensable(by="undo")
        def act(self) -> str:
            return "done"

        @compensation
        def undo(self, context: CompensationContext) -> None:
            sagacity.compensate(context.saga_id)  # a compensation that recompensates

    wrapped = sagacity.wrap(Reentrant())
    result = sagacity.saga("reentrant", lambda: (wrapped.act(), 1 / 0))
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "already being compensated" in result.dirty[0].reason
    assert isinstance(CompensationConflictError("x"), Exception)


def test_an_interrupted_invoke_journals_nothing_for_the_step_and_stops(ledger: Ledger) -> None:
    """A hook that could not even start the undo (the service's claim store down) is no
    outcome: the run stops with the intent open, and the next run calls the undo."""
    from sagacity.errors import CompensationInterruptedError

    journal = InMemoryJournal()
    producer = Sagacity(journal=journal, compensation="delegated")
    tools = producer.wrap(OrderTools(ledger))
    producer.saga("cut", lambda: (tools.reserve_inventory("p", 1), tools.charge_card(3), 1 / 0))
    service = Sagacity(journal=journal)
    service.wrap(OrderTools(ledger))
    asked: list[int] = []

    def interrupted(call: Any) -> Any:
        asked.append(call.seq)
        raise CompensationInterruptedError("claims database unreachable", seq=call.seq)

    before = len(journal.entries("cut"))
    with pytest.raises(CompensationInterruptedError, match="claims database unreachable"):
        CompensationRunner(journal, service.registry, invoke=interrupted).run("cut")
    added = journal.entries("cut")[before:]
    assert [e.event_type for e in added] == [E.COMPENSATION_INTENT]  # and nothing after it
    assert asked == [added[0].ref_seq]  # the newest step only: the run stopped there
    assert "refund" not in ledger.names()
    assert not only(journal.entries("cut"), E.COMPENSATION_FAILED)
