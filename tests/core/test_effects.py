"""A side effect happens once in a saga: effect keys, refusals and recovered failures
(docs/adr/0026-effects-and-refusals.md), on the in-memory journal.

Every case checks what ran (the tool's own record), what the chain says (and that the grammar
finds nothing impossible in it) and the line the caller sees."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    EntryDraft,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
    verify,
)
from sagacity.chain import committing
from sagacity.chain._grammar import check
from sagacity.effects._effect_calls import Notice
from sagacity.errors import DeclarationError, SagaExistsError, SagaFailedError

E = EventType


class OutOfStockError(Exception):
    """The shop's refusal: nothing was reserved."""


class Shop:
    def __init__(self) -> None:
        self.charged: list[tuple[str, int]] = []
        self.sent: list[str] = []
        self.reserved: list[str] = []
        self.released: list[str] = []
        self.shipped: list[str] = []
        self.fail_ship = 0
        self.gate = threading.Event()
        self.gate.set()

    @compensable(by="refund", effect_key=["order_id"])
    def charge(self, order_id: str, amount: int) -> dict[str, Any]:
        self.gate.wait(5)
        self.charged.append((order_id, amount))
        return {"charge": f"ch-{order_id}", "amount": amount}

    @compensation
    def refund(self, context: CompensationContext) -> None:
        self.charged.remove((context.arguments["order_id"], context.arguments["amount"]))

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_email(self, to: str) -> str:
        self.sent.append(to)
        return f"sent to {to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, effect_key=None, name="newsletter")
    def send_newsletter(self, to: str) -> str:
        self.sent.append(to)
        return "sent"

    @compensable(by="release", refuses=(OutOfStockError,), effect_key=["sku"])
    def reserve(self, sku: str) -> str:
        if sku.startswith("none-"):
            raise OutOfStockError(f"{sku} is out of stock")
        self.reserved.append(sku)
        return f"held {sku}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        self.released.append(context.arguments["sku"])

    @compensable(by="unship")
    def ship(self, order_id: str) -> str:
        if self.fail_ship:
            self.fail_ship -= 1
            raise RuntimeError("carrier down")
        self.shipped.append(order_id)
        return f"shipped {order_id}"

    @compensation
    def unship(self, context: CompensationContext) -> None:
        self.shipped.remove(context.arguments["order_id"])


def _kinds(entries: Sequence[JournalEntry]) -> list[str]:
    return [str(e.event_type) for e in entries]


def _sound(entries: Sequence[JournalEntry]) -> None:
    assert verify(entries).ok
    assert check(entries) == []


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def sagacity() -> Sagacity:
    return Sagacity(writer_id="agent-1")


# --- effect keys -------------------------------------------------------------------------------


def test_the_same_effect_key_replays_the_recorded_result_and_the_tool_runs_once(
    sagacity: Sagacity, shop: Shop
) -> None:
    tools = sagacity.wrap(shop)
    results: list[Any] = []

    def work() -> None:
        results.append(tools.charge("o-7", 20))
        results.append(tools.charge("o-7", 20))

    assert sagacity.saga("s", work).status is SagaStatus.COMPLETED
    assert shop.charged == [("o-7", 20)]
    assert results == [{"charge": "ch-o-7", "amount": 20}] * 2
    entries = sagacity.entries("s")
    assert _kinds(entries) == ["SAGA_OPENED", "INTENT", "EXECUTED", "REPLAYED", "SAGA_ENDED"]
    replayed = entries[3]
    assert replayed.ref_seq == 2
    assert replayed.attributes["effect_key"] == '["$.order_id"]'
    assert entries[1].attributes["effect_key"] == '["$.order_id"]'
    _sound(entries)


def test_a_replay_told_to_a_model_is_one_line_then_the_result(
    sagacity: Sagacity, shop: Shop
) -> None:
    from sagacity.tools._tool import journaled_call

    sagacity.wrap(shop)
    definition = sagacity.registry.get("charge")
    assert definition is not None
    told: list[Any] = []

    def call() -> Any:
        return journaled_call(
            sagacity,
            definition.definition,
            lambda: {"order_id": "o-1", "amount": 5},
            lambda: definition.function(order_id="o-1", amount=5),
            told=True,
        )

    sagacity.saga("t", lambda: (told.append(call()), told.append(call())))
    line, result = str(told[1]).split("\n")
    assert line == (
        "[REPLAYED] Tool 'charge' was not called again: the call at seq 2 of saga t already "
        "did this (same order_id); its recorded result follows."
    )
    assert json.loads(result) == {"charge": "ch-o-1", "amount": 5}
    assert isinstance(told[1], Notice)
    assert told[1].kind == "replayed"


def test_the_same_key_with_other_arguments_is_refused_naming_the_earlier_call(
    sagacity: Sagacity, shop: Shop
) -> None:
    tools = sagacity.wrap(shop)
    said: list[Any] = []
    result = sagacity.saga(
        "s", lambda: (tools.charge("o-7", 20), said.append(tools.charge("o-7", 99)))
    )
    assert result.status is SagaStatus.COMPLETED
    assert shop.charged == [("o-7", 20)]
    assert said == [
        "[EFFECT_CONFLICT] Tool 'charge' was not called: the call at seq 2 of saga s already "
        "did this (same order_id) with other arguments; use that call's result, or give "
        "order_id a new value for a new effect."
    ]
    refused = sagacity.entries("s")[3]
    assert refused.event_type is E.CONSTRAINT_VIOLATED
    assert refused.attributes["effect_of"] == "2"
    assert refused.ref_seq is None  # no request is decided on
    assert refused.error is not None
    assert refused.error.startswith("[effect] charge: ")
    _sound(sagacity.entries("s"))


def test_another_key_runs(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)
    sagacity.saga("s", lambda: (tools.charge("o-1", 20), tools.charge("o-2", 20)))
    assert shop.charged == [("o-1", 20), ("o-2", 20)]


def test_a_failed_call_frees_its_key_and_a_retry_recovers_the_failure(
    sagacity: Sagacity, shop: Shop
) -> None:
    tools = sagacity.wrap(shop)
    shop.fail_ship = 1

    def work() -> None:
        tools.charge("o-1", 20)
        with pytest.raises(RuntimeError):
            tools.ship("o-1")
        tools.ship("o-1")

    result = sagacity.saga("s", work)
    assert result.status is SagaStatus.COMPLETED
    assert shop.charged == [("o-1", 20)]
    assert shop.shipped == ["o-1"]
    entries = sagacity.entries("s")
    assert _kinds(entries)[3:7] == ["INTENT", "FAILED", "INTENT", "EXECUTED"]
    assert entries[6].attributes["recovers"] == "5"
    _sound(entries)


def test_a_failure_left_behind_still_compensates(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)
    shop.fail_ship = 1

    def work() -> None:
        tools.charge("o-1", 20)
        with pytest.raises(RuntimeError):
            tools.ship("o-1")

    assert sagacity.saga("s", work).status is SagaStatus.COMPENSATED
    assert shop.charged == []


def test_after_a_failure_only_a_retry_of_the_failed_tool_and_reads_run(
    sagacity: Sagacity, shop: Shop
) -> None:
    tools = sagacity.wrap(shop)
    shop.fail_ship = 1

    def work() -> None:
        with pytest.raises(RuntimeError):
            tools.ship("o-1")
        with pytest.raises(SagaFailedError, match="unless a retry of 'ship' succeeds"):
            tools.charge("o-1", 20)

    assert sagacity.saga("s", work).status is SagaStatus.COMPENSATED
    assert shop.charged == []


def test_a_gated_call_repeated_while_its_request_is_open_makes_no_second_request(
    sagacity: Sagacity, shop: Shop
) -> None:
    tools = sagacity.wrap(shop)
    said: list[str] = []
    result = sagacity.saga(
        "s", lambda: (said.append(tools.send_email("a@x")), said.append(tools.send_email("a@x")))
    )
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert said == ["[AWAITING_APPROVAL] Tool 'send_email' requires human approval"] * 2
    assert [r.seq for r in sagacity.pending_approvals("s")] == [2]
    entries = sagacity.entries("s")
    assert _kinds(entries) == ["SAGA_OPENED", "AWAITING_APPROVAL", "REPLAYED", "SAGA_ENDED"]
    assert entries[2].ref_seq == 2
    assert entries[2].attributes["effect_key"] == "*"
    _sound(entries)


def test_a_gated_call_made_again_after_its_approved_run_replays_its_result(
    sagacity: Sagacity, shop: Shop
) -> None:
    """The request is decided and resumed by another process: the conversation reads the
    chain before answering, and the e-mail is not sent again (nor requested again)."""
    tools = sagacity.wrap(shop)
    conversation = sagacity.conversation("c-1")
    conversation.call(lambda: tools.send_email("a@x"))
    [request] = sagacity.pending_approvals("c-1")
    sagacity.approve("c-1", request.seq, "boss@example.com")
    # The resume runs while the conversation is still open (the request handed it over).
    other = Sagacity(sagacity.journal, writer_id="approvals")
    elsewhere = Shop()
    other.wrap(elsewhere)
    other.resume_saga("c-1", request.seq, request.payload)
    assert conversation.call(lambda: tools.send_email("a@x")) == "sent to a@x"
    assert elsewhere.sent == ["a@x"]
    assert shop.sent == []
    kinds = _kinds(sagacity.entries("c-1"))
    assert kinds.count("AWAITING_APPROVAL") == 1
    assert kinds.count("REPLAYED") == 1


def test_effect_key_none_opts_a_gated_tool_out(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)
    sagacity.saga("s", lambda: (tools.send_newsletter("a@x"), tools.send_newsletter("a@x")))
    assert len(sagacity.pending_approvals("s")) == 2


def test_concurrent_calls_with_one_key_run_once(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)
    shop.gate.clear()
    said: list[Any] = []

    async def work() -> None:
        first = asyncio.create_task(asyncio.to_thread(tools.charge, "o-9", 1))
        while not sagacity.entries("c") or sagacity.entries("c")[-1].event_type is not E.INTENT:
            await asyncio.sleep(0.001)
        said.append(await asyncio.to_thread(tools.charge, "o-9", 1))
        shop.gate.set()
        await first

    assert asyncio.run(sagacity.saga_async("c", work)).status is SagaStatus.COMPLETED
    assert shop.charged == [("o-9", 1)]
    assert said == [
        "[IN_PROGRESS] Tool 'charge' was not called: the call at seq 2 of saga c with the same "
        "order_id has not finished."
    ]
    _sound(sagacity.entries("c"))


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"reversibility": Reversibility.READ, "effect_key": ["q"]}, "a READ tool has no effect"),
        ({"effect_key": "order_id"}, "effect_key is a list of fields"),
        ({"effect_key": []}, "names no field"),
        ({"effect_key": ["$.a.b"], "redact": ["$.a"]}, r"lies inside redacted field \$\.a"),
        ({"refuses": (KeyboardInterrupt,)}, "subclasses of Exception"),
        ({"refuses": OutOfStockError}, "a list of exception classes"),
    ],
)
def test_malformed_keys_and_refusals_are_refused_at_declaration(
    options: dict[str, Any], reason: str
) -> None:
    with pytest.raises(DeclarationError, match=reason):

        @compensable(**options)
        def tool(q: str) -> None:
            return None


# --- refusals ----------------------------------------------------------------------------------


def test_a_declared_refusal_is_no_failed_step(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)

    def work() -> None:
        tools.charge("o-1", 20)
        with pytest.raises(OutOfStockError):
            tools.reserve("none-left")
        tools.reserve("sku-2")  # another tool after the refusal still runs

    result = sagacity.saga("s", work)
    assert result.status is SagaStatus.COMPLETED
    assert shop.charged == [("o-1", 20)]
    assert shop.reserved == ["sku-2"]
    refused = sagacity.entries("s")[4]
    assert refused.event_type is E.FAILED
    assert refused.attributes["refused"] == "declared"
    _sound(sagacity.entries("s"))


def test_a_refused_key_is_free_again(sagacity: Sagacity, shop: Shop) -> None:
    tools = sagacity.wrap(shop)

    def work() -> None:
        with pytest.raises(OutOfStockError):
            tools.reserve("none-1")
        with pytest.raises(OutOfStockError):
            tools.reserve("none-1")  # the same key: it refused, so it is asked again

    sagacity.saga("s", work)
    assert _kinds(sagacity.entries("s")).count("FAILED") == 2


# --- a saga continued by its writer ------------------------------------------------------------


def _crashed(journal: InMemoryJournal, saga_id: str, *, executed: bool) -> None:
    """The chain a process with writer id agent-1 left when it stopped during a call."""
    opened = EntryDraft(
        saga_id=saga_id,
        event_type=E.SAGA_OPENED,
        actor="agent-1",
        attributes={"compensation": "inline"},
    )
    journal.append(opened)
    payload = '{"order_id":"o-7","amount":20}'
    intent = journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.INTENT,
            tool="charge",
            payload=payload,
            actor="agent-1",
            attributes={"reversibility": "COMPENSATABLE", "effect_key": '["$.order_id"]'},
        )
    )
    if executed:
        journal.append(
            EntryDraft(
                saga_id=saga_id,
                event_type=E.EXECUTED,
                tool="charge",
                result='{"charge":"ch-o-7","amount":20}',
                actor="agent-1",
                attributes={"ref_seq": str(intent.seq), "result_encoding": "json"},
            )
        )


def test_a_restarted_writer_continues_its_conversation_and_replays_what_ran(shop: Shop) -> None:
    journal = InMemoryJournal()
    _crashed(journal, "chat-1", executed=True)
    again = Sagacity(journal, writer_id="agent-1")
    tools = again.wrap(shop)
    conversation = again.conversation("chat-1")
    assert conversation.call(lambda: tools.charge("o-7", 20)) == {"charge": "ch-o-7", "amount": 20}
    assert shop.charged == []
    assert conversation.end().status is SagaStatus.COMPLETED
    _sound(journal.entries("chat-1"))


def test_a_call_whose_intent_has_no_outcome_is_in_doubt_until_a_person_settles_it(
    shop: Shop,
) -> None:
    journal = InMemoryJournal()
    _crashed(journal, "chat-2", executed=False)
    again = Sagacity(journal, writer_id="agent-1")
    tools = again.wrap(shop)
    conversation = again.conversation("chat-2")
    said = conversation.call(lambda: tools.charge("o-7", 20))
    assert said == (
        "[IN_DOUBT] Tool 'charge' was not called: the call at seq 2 of saga chat-2 with the "
        "same order_id stopped without an outcome, so it may have taken effect; a person must "
        "settle it first. Do not report success."
    )
    conversation.call(lambda: tools.charge("o-7", 99))  # other arguments: still in doubt
    assert shop.charged == []
    suspects = [e for e in journal.entries("chat-2") if e.event_type is E.SUSPECT]
    assert len(suspects) == 1
    assert suspects[0].ref_seq == 2
    assert suspects[0].attributes["phase"] == "call"
    with pytest.raises(SagaFailedError):  # the saga will be undone: nothing new runs
        conversation.call(lambda: tools.ship("o-7"))
    result = conversation.end()
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [2]
    _sound(journal.entries("chat-2"))
    settled = again.settle("chat-2", 2, "not-executed", "ops@example.com", note="no charge")
    assert settled.status is SagaStatus.COMPENSATED
    assert shop.charged == []


def test_only_the_writer_that_held_a_saga_continues_it(shop: Shop) -> None:
    journal = InMemoryJournal()
    _crashed(journal, "chat-3", executed=False)
    with pytest.raises(SagaExistsError):
        Sagacity(journal, writer_id="someone-else").conversation("chat-3")


# --- redacted key fields -----------------------------------------------------------------------


class SealingMemoryJournal(InMemoryJournal):
    """A stand-in for a journal with a key service (chain form 2)."""

    seals = True

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return super().append(committing(draft), durable=durable)


class Payments:
    def __init__(self) -> None:
        self.charged: list[str] = []

    @compensable(by="void", effect_key=["card_number", "order_id"], redact=["card_number"])
    def pay(self, card_number: str, order_id: str, amount: int) -> str:
        self.charged.append(order_id)
        return f"paid {order_id}"

    @compensation
    def void(self, context: CompensationContext) -> None:
        return None


def test_a_redacted_key_field_is_never_journaled_in_clear_and_still_matches_after_a_restart() -> (
    None
):
    journal = SealingMemoryJournal()
    payments = Payments()
    first = Sagacity(journal, writer_id="agent-1")
    tools = first.wrap(payments)
    conversation = first.conversation("pay-1")
    conversation.call(lambda: tools.pay("4111111111111111", "o-1", 5))
    assert "4111111111111111" not in json.dumps([e.to_dict() for e in journal.entries("pay-1")])
    # A restarted process (same writer id) folds the chain: the card is only its redaction key.
    again = Sagacity(journal, writer_id="agent-1")
    tools_again = again.wrap(payments)
    continued = again.conversation("pay-1")
    assert continued.call(lambda: tools_again.pay("4111111111111111", "o-1", 5)) == "paid o-1"
    assert continued.call(lambda: tools_again.pay("4111111111111111", "o-1", 6)).startswith(
        "[EFFECT_CONFLICT]"
    )
    continued.call(lambda: tools_again.pay("5500000000000004", "o-1", 5))  # another card
    assert payments.charged == ["o-1", "o-1"]
    entries = journal.entries("pay-1")
    assert "4111111111111111" not in json.dumps([e.to_dict() for e in entries])
    assert _kinds(entries).count("REPLAYED") == 1
