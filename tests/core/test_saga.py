"""The hot path and saga(): journaling around each call, and how a run is decided."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import pytest

from sagacity import (
    EntryDraft,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    verify,
)
from sagacity.errors import (
    ConfigurationError,
    DeclarationError,
    InvalidArgumentError,
    JournalUnavailableError,
    NestedSagaError,
    SagaClosedError,
    SagaExistsError,
    SagaFailedError,
)

from .conftest import Ledger, OrderTools, kinds, only

E = EventType


def test_completed_saga_journals_intent_before_and_executed_after(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    seen: list[list[EventType]] = []

    class Probe:
        @compensable(reversibility=Reversibility.READ)
        def probe(self) -> str:
            seen.append([e.event_type for e in sagacity.journal.entries("order-1")])
            return "ok"

    probe = sagacity.wrap(Probe())
    result = sagacity.saga("order-1", lambda: (tools.reserve_inventory("p1", 2), probe.probe()))
    assert result.status is SagaStatus.COMPLETED
    assert result.value == ("res-p1-2", "ok")
    assert seen == [[E.SAGA_OPENED, E.INTENT, E.EXECUTED, E.INTENT]]  # INTENT before the call
    entries = sagacity.journal.entries("order-1")
    assert kinds(entries) == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
        (E.INTENT, "probe"),
        (E.EXECUTED, "probe"),
        (E.SAGA_ENDED, None),
    ]
    intent, executed = entries[1], entries[2]
    assert intent.payload == '{"product_id":"p1","quantity":2}'
    assert executed.result == "res-p1-2"
    assert executed.ref_seq == intent.seq
    assert executed.attributes["result_encoding"] == "text"
    assert entries[0].actor == "test-writer"
    assert entries[0].attributes["compensation"] == "inline"
    assert entries[-1].result == "COMPLETED"
    assert verify(entries).ok


def test_payload_is_compact_json_in_declaration_order_with_defaults(
    sagacity: Sagacity, tools: Any
) -> None:
    sagacity.saga("p", lambda: tools.charge_card(currency="USD", amount=5))
    intent = only(sagacity.journal.entries("p"), E.INTENT)[0]
    assert intent.payload == '{"amount":5,"currency":"USD"}'
    sagacity.saga("p2", lambda: tools.charge_card(7))
    assert only(sagacity.journal.entries("p2"), E.INTENT)[0].payload == (
        '{"amount":7,"currency":"EUR"}'
    )


def test_non_text_results_are_compact_json_and_unencodable_fall_back_to_repr(
    sagacity: Sagacity,
) -> None:
    class Results:
        @compensable(reversibility=Reversibility.READ)
        def as_dict(self) -> dict[str, Any]:
            return {"b": 1, "a": "é"}

        @compensable(reversibility=Reversibility.READ)
        def as_object(self) -> object:
            return complex(1, 2)

        @compensable(reversibility=Reversibility.READ)
        def with_nul(self) -> str:
            return "a\x00b"

    tools = sagacity.wrap(Results())
    sagacity.saga("r", lambda: (tools.as_dict(), tools.as_object(), tools.with_nul()))
    executed = only(sagacity.journal.entries("r"), E.EXECUTED)
    assert [(e.result, e.attributes["result_encoding"]) for e in executed] == [
        ('{"b":1,"a":"é"}', "json"),
        ("(1+2j)", "repr"),
        ('"a\\u0000b"', "json"),
    ]


def test_tool_outside_a_saga_runs_straight_through_unjournaled(
    sagacity: Sagacity, tools: Any, ledger: Ledger, journal: InMemoryJournal
) -> None:
    assert tools.reserve_inventory("p", 1) == "res-p-1"
    assert tools.send_confirmation("o") == "sent-o"  # not gated outside a saga
    assert ledger.names() == ["reserve_inventory", "send_confirmation"]
    assert journal.saga_ids() == ()


def test_failure_compensates_executed_steps_in_reverse_order(
    sagacity: Sagacity, tools: Any, order_tools: OrderTools, ledger: Ledger
) -> None:
    order_tools.fail_charge = True

    def work() -> None:
        tools.reserve_inventory("p1", 1)
        tools.lookup_stock("p1")
        tools.reserve_inventory("p2", 3)
        tools.charge_card(10)

    result = sagacity.saga("fail-1", work)
    assert result.status is SagaStatus.COMPENSATED
    assert result.error == "RuntimeError: card declined"
    assert isinstance(result.exception, RuntimeError)
    assert ledger.names() == [
        "reserve_inventory",
        "lookup_stock",
        "reserve_inventory",
        "release_inventory",
        "release_inventory",
    ]
    assert [c.result for c in ledger.contexts] == ["res-p2-3", "res-p1-1"]  # reverse seq order
    entries = sagacity.journal.entries("fail-1")
    failed = only(entries, E.FAILED)[0]
    assert failed.error == "RuntimeError: card declined"
    compensated = only(entries, E.COMPENSATED)
    executed = only(entries, E.EXECUTED)
    assert [c.ref_seq for c in compensated] == [executed[2].seq, executed[0].seq]
    assert entries[-1].event_type is E.SAGA_ENDED
    assert entries[-1].result == "COMPENSATED"
    assert len(result.compensated) == 2
    assert verify(entries).ok


def test_swallowed_failure_still_compensates(
    sagacity: Sagacity, tools: Any, order_tools: OrderTools, ledger: Ledger
) -> None:
    order_tools.fail_charge = True

    def work() -> str:
        tools.reserve_inventory("p1", 1)
        # A framework turned the error into a message and the model carried on.
        with contextlib.suppress(RuntimeError):
            tools.charge_card(10)
        return "the model says all is well"

    result = sagacity.saga("swallowed", work)
    assert result.status is SagaStatus.COMPENSATED
    assert result.value == "the model says all is well"
    assert "release_inventory" in ledger.names()


def test_calls_after_a_failure_are_refused_unjournaled(
    sagacity: Sagacity, tools: Any, order_tools: OrderTools, ledger: Ledger
) -> None:
    order_tools.fail_charge = True
    refusals: list[SagaFailedError] = []

    def work() -> None:
        with contextlib.suppress(RuntimeError):
            tools.charge_card(10)
        try:
            tools.reserve_inventory("p9", 1)
        except SagaFailedError as exc:
            refusals.append(exc)

    result = sagacity.saga("after-failure", work)
    assert len(refusals) == 1
    assert "charge_card" in str(refusals[0])
    assert "reserve_inventory" not in ledger.names()
    assert (E.INTENT, "reserve_inventory") not in kinds(sagacity.journal.entries("after-failure"))
    assert result.status is SagaStatus.COMPENSATED


def test_work_raising_without_a_tool_failure_compensates(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    def work() -> None:
        tools.reserve_inventory("p1", 1)
        raise ValueError("model gave up")

    result = sagacity.saga("work-raised", work)
    assert result.status is SagaStatus.COMPENSATED
    assert result.error == "ValueError: model gave up"
    assert ledger.names() == ["reserve_inventory", "release_inventory"]
    assert sagacity.journal.entries("work-raised")[-1].error == "ValueError: model gave up"


def test_irreversible_tool_is_gated_and_not_called(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    replies: list[str] = []

    def work() -> str:
        tools.reserve_inventory("p1", 1)
        replies.append(tools.send_confirmation("order-123"))
        return "done"

    result = sagacity.saga("gated", work)
    assert replies == ["[AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval"]
    assert "send_confirmation" not in ledger.names()
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_tool_name == "send_confirmation"
    entries = sagacity.journal.entries("gated")
    request = only(entries, E.AWAITING_APPROVAL)[0]
    assert result.awaiting_seq == request.seq
    assert request.payload == '{"order_id":"order-123"}'
    assert (
        request.attributes["payload_sha256"]
        == hashlib.sha256(b'{"order_id":"order-123"}').hexdigest()
    )
    assert request.attributes["signatures_required"] == "1"
    assert request.attributes["policy_version"] == "1"
    assert request.attributes["reversibility"] == "IRREVERSIBLE"
    assert entries[-1].result == "AWAITING_APPROVAL"
    assert [r.seq for r in sagacity.pending_approvals("gated")] == [request.seq]
    assert "waiting for human approval" in result.summary()


def test_intent_not_acknowledged_means_the_tool_is_not_called(ledger: Ledger) -> None:
    class FailingIntent(InMemoryJournal):
        def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
            if draft.event_type is E.INTENT:
                raise JournalUnavailableError("broker did not acknowledge in time")
            return super().append(draft, durable=durable)

    journal = FailingIntent()
    sagacity = Sagacity(journal=journal)
    tools = sagacity.wrap(OrderTools(ledger))
    result = sagacity.saga("no-ack", lambda: tools.reserve_inventory("p", 1))
    assert ledger.names() == []
    assert result.status is SagaStatus.COMPENSATED
    assert isinstance(result.exception, JournalUnavailableError)
    assert "did not acknowledge" in (result.error or "")
    seen: list[BaseException] = []

    def work() -> None:
        try:
            tools.reserve_inventory("p", 1)
        except JournalUnavailableError as exc:  # the caller of the tool sees the error
            seen.append(exc)

    sagacity.saga("no-ack-2", work)
    assert len(seen) == 1
    assert ledger.names() == []


def test_intent_is_durable_and_outcomes_may_be_buffered_then_flushed(ledger: Ledger) -> None:
    class Recording(InMemoryJournal):
        def __init__(self) -> None:
            super().__init__()
            self.log: list[tuple[str, bool]] = []
            self.flushes = 0

        def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
            self.log.append((draft.event_type.value, durable))
            return super().append(draft, durable=durable)

        def flush(self, timeout: float | None = None) -> None:
            self.flushes += 1

    journal = Recording()
    sagacity = Sagacity(journal=journal)
    tools = sagacity.wrap(OrderTools(ledger))
    sagacity.saga("d", lambda: tools.reserve_inventory("p", 1))
    assert ("INTENT", True) in journal.log
    assert journal.flushes >= 1


def test_base_exception_is_journaled_failed_and_re_raised(
    sagacity: Sagacity, ledger: Ledger
) -> None:
    class Interrupting:
        @compensable(reversibility=Reversibility.READ)
        def stop(self) -> None:
            raise KeyboardInterrupt

    tools = sagacity.wrap(Interrupting())
    with pytest.raises(KeyboardInterrupt):
        sagacity.saga("interrupted", tools.stop)
    entries = sagacity.journal.entries("interrupted")
    failed = only(entries, E.FAILED)
    assert len(failed) == 1
    assert failed[0].error == "KeyboardInterrupt"
    assert verify(entries).ok
    # The scope was closed: a new saga can start in this context.
    assert sagacity.saga("next", lambda: 1).status is SagaStatus.COMPLETED


def test_nested_saga_is_refused_and_outer_saga_unaffected(sagacity: Sagacity, tools: Any) -> None:
    errors: list[NestedSagaError] = []

    def inner() -> None:
        try:
            sagacity.saga("inner", lambda: None)
        except NestedSagaError as exc:
            errors.append(exc)

    result = sagacity.saga("outer", inner)
    assert len(errors) == 1
    assert "do not nest" in str(errors[0])
    assert sagacity.journal.entries("inner") == ()
    assert result.status is SagaStatus.COMPLETED


def test_scope_is_closed_after_the_saga_even_when_work_raises(
    sagacity: Sagacity, tools: Any, journal: InMemoryJournal, ledger: Ledger
) -> None:
    def work() -> None:
        raise RuntimeError("x")

    sagacity.saga("s1", work)
    tools.reserve_inventory("after", 1)  # no saga any more: unjournaled
    assert journal.saga_ids() == ("s1",)
    assert ledger.names() == ["reserve_inventory"]


def test_saga_id_is_single_use_and_validated(sagacity: Sagacity) -> None:
    sagacity.saga("once", lambda: None)
    with pytest.raises(SagaExistsError):
        sagacity.saga("once", lambda: None)
    with pytest.raises(InvalidArgumentError):
        sagacity.saga("", lambda: None)
    with pytest.raises(InvalidArgumentError):
        sagacity.saga("x", "not callable")  # type: ignore[arg-type]


def test_async_work_in_sync_saga_is_reported_not_leaked(sagacity: Sagacity) -> None:
    async def work() -> None: ...

    result = sagacity.saga("async-in-sync", work)
    assert result.status is SagaStatus.COMPENSATED
    assert "saga_async" in (result.error or "")


def test_a_tool_kept_past_its_saga_is_refused(sagacity: Sagacity, tools: Any) -> None:
    import contextvars

    captured: list[contextvars.Context] = []
    sagacity.saga("kept", lambda: captured.append(contextvars.copy_context()))
    with pytest.raises(SagaClosedError):
        captured[0].run(tools.reserve_inventory, "p", 1)


def test_delegated_mode_requests_compensation_instead_of_running_it(
    ledger: Ledger, journal: InMemoryJournal
) -> None:
    sagacity = Sagacity(journal=journal, compensation="delegated")
    order_tools = OrderTools(ledger)
    order_tools.fail_charge = True
    tools = sagacity.wrap(order_tools)

    def work() -> None:
        tools.reserve_inventory("p", 1)
        tools.charge_card(1)

    result = sagacity.saga("delegated", work)
    assert result.status is SagaStatus.COMPENSATION_PENDING
    assert "release_inventory" not in ledger.names()
    entries = journal.entries("delegated")
    assert entries[0].attributes["compensation"] == "delegated"
    request = only(entries, E.COMPENSATION_REQUESTED)[0]
    failed = only(entries, E.FAILED)[0]
    assert request.attributes["reason"] == "FAILED"
    assert request.ref_seq == failed.seq
    assert entries[-1].event_type is E.SAGA_ENDED
    assert entries[-1].result == "COMPENSATION_PENDING"
    # The compensation service's path: the runner, from the chain alone.
    done = sagacity.compensate("delegated")
    assert done.status is SagaStatus.COMPENSATED
    assert "release_inventory" in ledger.names()


def test_configuration_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        Sagacity(compensation="later")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Sagacity(journal=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Sagacity(approval_ttl=0)


def test_from_env_without_the_kafka_journal_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sagacity._env as env

    monkeypatch.delattr(env, "journal_from_env", raising=False)
    with pytest.raises(ConfigurationError, match="journal_from_env"):
        Sagacity.from_env()


def test_from_env_builds_a_delegated_sagacity(monkeypatch: pytest.MonkeyPatch) -> None:
    import sagacity._env as env

    journal = InMemoryJournal()
    journal.writer_id = "host/1/abc"  # type: ignore[attr-defined]
    asked: list[str | None] = []

    def from_env(*, writer_id: str | None = None) -> InMemoryJournal:
        asked.append(writer_id)
        return journal

    monkeypatch.setattr(env, "journal_from_env", from_env, raising=False)
    built = Sagacity.from_env()
    assert built.journal is journal
    assert built.compensation_mode == "delegated"
    assert built.writer_id == "host/1/abc"  # one identity for the journal and the chain
    named = Sagacity.from_env(writer_id="agent-7", compensation="inline")
    assert asked == [None, "agent-7"]
    assert named.writer_id == "agent-7"
    assert named.compensation_mode == "inline"


def test_summary_names_dirty_steps(sagacity: Sagacity, tools: Any, order_tools: Any) -> None:
    order_tools.fail_release = True

    def work() -> None:
        tools.reserve_inventory("p", 1)
        raise RuntimeError("stop")

    result = sagacity.saga("dirty", work)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "reserve_inventory" in result.summary()
    assert "inventory service down" in result.summary()
    assert json.loads(json.dumps(result.summary()))


@pytest.mark.parametrize(
    ("status", "fragment"),
    [
        (SagaStatus.COMPLETED, "completed"),
        (SagaStatus.COMPENSATED, "1 step(s) undone"),
        (SagaStatus.COMPENSATION_PENDING, "compensation service"),
        (SagaStatus.AWAITING_APPROVAL, "waiting for human approval of tool 'wire' (seq 4)"),
        (SagaStatus.REJECTED, "rejected"),
        (SagaStatus.EXPIRED, "expired"),
        (SagaStatus.COMPENSATION_FAILED, "still dirty: seq 2 charge (declined)"),
    ],
)
def test_summary_for_every_status(status: SagaStatus, fragment: str) -> None:
    from sagacity import SagaResult, Step

    result = SagaResult(
        status=status,
        saga_id="s",
        error="RuntimeError: x",
        awaiting_tool_name="wire",
        awaiting_seq=4,
        compensated=(3,),
        dirty=(Step(seq=2, tool="charge", reason="declined"),),
    )
    assert fragment in result.summary()
    assert result.summary().startswith("Saga 's'")


def test_sagas_on_many_threads_stay_isolated(sagacity: Sagacity, ledger: Ledger) -> None:
    import threading

    order_tools = OrderTools(ledger)
    tools = sagacity.wrap(order_tools)
    results: dict[str, Any] = {}

    def one(n: int) -> None:
        def work() -> None:
            for i in range(20):
                tools.reserve_inventory(f"t{n}", i)

        results[f"t{n}"] = sagacity.saga(f"t{n}", work)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.status is SagaStatus.COMPLETED for r in results.values())
    for n in range(8):
        entries = sagacity.journal.entries(f"t{n}")
        assert [e.payload for e in only(entries, E.INTENT)] == [
            f'{{"product_id":"t{n}","quantity":{i}}}' for i in range(20)
        ]
        assert verify(entries).ok


def test_a_wrong_call_or_unjournalable_arguments_raise_before_anything_is_journaled(
    sagacity: Sagacity, tools: Any, ledger: Ledger
) -> None:
    from sagacity.errors import SerializationError

    errors: list[BaseException] = []

    def work() -> None:
        for call in (
            lambda: tools.reserve_inventory("p"),  # missing argument
            lambda: tools.reserve_inventory("p", object()),  # not JSON
            lambda: tools.send_confirmation(object()),  # gated, not JSON
        ):
            try:
                call()
            except (TypeError, SerializationError) as exc:
                errors.append(exc)

    result = sagacity.saga("bad-calls", work)
    assert [type(e) for e in errors] == [TypeError, SerializationError, SerializationError]
    assert ledger.names() == []
    assert kinds(sagacity.journal.entries("bad-calls")) == [
        (E.SAGA_OPENED, None),
        (E.SAGA_ENDED, None),
    ]
    assert result.status is SagaStatus.COMPLETED


def test_a_name_clash_registers_nothing(sagacity: Sagacity) -> None:
    @compensable(name="lookup_stock", reversibility=Reversibility.READ)
    def impostor() -> None: ...

    sagacity.wrap(impostor)
    with pytest.raises(DeclarationError, match="two different tools"):
        sagacity.wrap(OrderTools(Ledger()))
    assert sagacity.registry.names() == ("lookup_stock",)
