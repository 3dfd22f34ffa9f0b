"""A redacted value never reaches an outcome's text (docs/adr/0019-erasure.md §5): the masking
rule, and every path that journals a call's result or error and a run's end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sagacity import EntryDraft, EventType, Reversibility, Sagacity, SagaStatus, compensable, verify
from sagacity.privacy._redaction import MASK, MIN_MASKED_CHARS, mask_draft, redact, value_texts
from tests.core.test_redaction import SealingMemoryJournal

E = EventType
CARD = "4111111111111111"


def _draft(**fields: Any) -> EntryDraft:
    return EntryDraft(saga_id="s", event_type=E.FAILED, tool="pay", **fields)


# --- the rule ------------------------------------------------------------------------------
def test_every_occurrence_is_masked_inside_other_text() -> None:
    texts = value_texts(CARD)
    draft = _draft(error=f"card={CARD}; again [{CARD}]x{CARD}4")
    assert mask_draft(draft, texts).error == f"card={MASK}; again [{MASK}]x{MASK}4"


def test_the_forms_a_value_is_echoed_in_are_masked() -> None:
    name = 'Zoë "Z" O\\Brien'
    texts = value_texts({"name": name, "number": 4111111111111111, "flag": True})
    for echoed in (name, json.dumps(name), json.dumps(name, ensure_ascii=False), repr(name)):
        masked = mask_draft(_draft(error=f"got {echoed}!"), texts).error or ""
        assert MASK in masked
        assert [t for t in texts if t in masked] == []
    assert mask_draft(_draft(error="n=4111111111111111"), texts).error == f"n={MASK}"
    assert "True" not in texts
    assert "name" not in texts


def test_values_shorter_than_the_minimum_are_not_masked() -> None:
    assert MIN_MASKED_CHARS == 4
    assert value_texts("123") == frozenset()
    assert value_texts(7) == frozenset()
    draft = _draft(error="code 123 refused at step 7")
    assert mask_draft(draft, value_texts("123") | value_texts(7)) is draft
    assert mask_draft(_draft(error="pin 1234"), value_texts("1234")).error == f"pin {MASK}"


def test_a_json_result_stays_json_and_a_masked_number_becomes_the_mask() -> None:
    draft = EntryDraft(
        saga_id="s",
        event_type=E.EXECUTED,
        tool="pay",
        result=json.dumps({"card": 4111111111111111, "note": f"card {CARD} ok", "n": 5}),
        attributes={"result_encoding": "json", "ref_seq": "1"},
    )
    masked = mask_draft(draft, value_texts(CARD) | value_texts(4111111111111111))
    assert json.loads(masked.result or "") == {"card": MASK, "note": f"card {MASK} ok", "n": 5}


def test_machine_attributes_and_the_payload_are_never_rewritten() -> None:
    secret = "abcd1234"
    draft = EntryDraft(
        saga_id="s",
        event_type=E.SAGA_ENDED,
        result="COMPENSATED",
        payload=json.dumps({"note": secret}),
        attributes={
            "payload_sha256": secret * 8,
            "caller": f"agent-{secret}",
            "dirty": f"seq 2 refund: refused {secret}",
            "undo_arguments": json.dumps({"card": secret}),
        },
    )
    masked = mask_draft(draft, value_texts(secret))
    assert masked.payload == draft.payload
    assert masked.attributes["payload_sha256"] == secret * 8
    assert masked.attributes["caller"] == f"agent-{secret}"
    assert masked.attributes["dirty"] == f"seq 2 refund: refused {MASK}"
    assert json.loads(masked.attributes["undo_arguments"]) == {"card": MASK}


def test_redact_gives_the_texts_of_the_values_it_replaced() -> None:
    payload = json.dumps({"card_number": CARD, "customer": {"iban": "DE89370400440532013000"}})
    out = redact("pay", payload, ("$.card_number", "$.customer"))
    assert CARD in out.values
    assert "DE89370400440532013000" in out.values
    assert redact("pay", payload, ()).values == frozenset()


# --- the paths that journal a call's outcome and a run's end --------------------------------
class Gateway:
    """A card gateway that echoes the number it was given, in its answers and its errors."""

    def __init__(self) -> None:
        self.fail = True

    @compensable(reversibility=Reversibility.READ, redact=["card_number"])
    def check(self, card_number: str) -> dict[str, str]:
        return {"card": card_number, "status": f"card {card_number} accepted"}

    @compensable(reversibility=Reversibility.READ, redact=["card_number"])
    def verify_card(self, card_number: str) -> str:
        raise ValueError(f"card {card_number} unknown")

    @compensable(reversibility=Reversibility.READ, redact=["card_number"])
    async def verify_async(self, card_number: str) -> str:
        raise ValueError(f"card {card_number} unknown")

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["card_number"])
    def charge(self, card_number: str, amount: int) -> str:
        if self.fail:
            raise ValueError(f"card {card_number} declined ({amount})")
        return f"charged card {card_number}"

    @compensable(
        reversibility=Reversibility.READ,
        redact=["card_number"],
        constraint=lambda args: f"card {args['card_number']} is blocked",
    )
    def blocked(self, card_number: str) -> str:
        return "never called"


def _sealed(mode: str = "inline") -> tuple[Sagacity, Gateway, Any]:
    sagacity = Sagacity(SealingMemoryJournal(), compensation=mode)  # type: ignore[arg-type]
    gateway = Gateway()
    return sagacity, gateway, sagacity.wrap(gateway)


def _clear(sagacity: Sagacity, saga: str) -> list[tuple[int, str]]:
    """The events of ``saga`` holding the card number in clear (none, once masked)."""
    entries = sagacity.journal.entries(saga)
    assert verify(entries).ok
    return [(e.seq, e.event_type.value) for e in entries if CARD in json.dumps(e.to_dict())]


def _errors(sagacity: Sagacity, saga: str, *events: EventType) -> list[str | None]:
    return [e.error for e in sagacity.journal.entries(saga) if e.event_type in events]


@pytest.mark.parametrize("mode", ["inline", "delegated"])
def test_a_result_and_the_runs_error_echoing_the_value_are_journaled_masked(mode: str) -> None:
    sagacity, _gateway, tools = _sealed(mode)

    def work() -> None:
        tools.check(CARD)
        raise RuntimeError(f"payment of card {CARD} failed")

    result = sagacity.saga("s", work)
    assert result.status in (SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_PENDING)
    assert _clear(sagacity, "s") == []
    ends = _errors(sagacity, "s", E.SAGA_ENDED, E.COMPENSATION_REQUESTED)
    assert ends
    assert set(ends) == {f"RuntimeError: payment of card {MASK} failed"}
    executed = next(e for e in sagacity.journal.entries("s") if e.event_type is E.EXECUTED)
    assert json.loads(executed.result or "") == {"card": MASK, "status": f"card {MASK} accepted"}


def test_a_failed_call_echoing_the_value_is_journaled_masked() -> None:
    sagacity, _gateway, tools = _sealed("delegated")
    result = sagacity.saga("s", lambda: tools.verify_card(CARD))
    assert result.status is SagaStatus.COMPENSATION_PENDING
    assert _clear(sagacity, "s") == []
    want = f"ValueError: card {MASK} unknown"
    assert _errors(sagacity, "s", E.FAILED, E.COMPENSATION_REQUESTED, E.SAGA_ENDED) == [want] * 3


def test_an_async_call_echoing_the_value_is_journaled_masked() -> None:
    sagacity, _gateway, tools = _sealed("delegated")

    async def work() -> None:
        await tools.verify_async(CARD)

    result = asyncio.run(sagacity.saga_async("s", work))
    assert result.status is SagaStatus.COMPENSATION_PENDING
    assert _clear(sagacity, "s") == []
    assert _errors(sagacity, "s", E.FAILED) == [f"ValueError: card {MASK} unknown"]


def test_a_constraints_refusal_echoing_the_value_is_journaled_masked() -> None:
    sagacity, _gateway, tools = _sealed()
    result = sagacity.saga("s", lambda: tools.blocked(CARD))
    assert result.status is SagaStatus.COMPLETED
    assert _clear(sagacity, "s") == []
    assert _errors(sagacity, "s", E.CONSTRAINT_VIOLATED) == [
        f"[constraint] blocked: card {MASK} is blocked"
    ]


def _live(amount: int = 120) -> str:
    return json.dumps({"card_number": CARD, "amount": amount}, separators=(",", ":"))


@pytest.mark.parametrize("fail", [True, False])
def test_a_resumed_call_echoing_the_value_is_journaled_masked(fail: bool) -> None:
    sagacity, gateway, tools = _sealed("delegated")
    gateway.fail = fail
    held = sagacity.saga("s", lambda: tools.charge(CARD, 120))
    assert held.awaiting_seq is not None
    sagacity.approve("s", held.awaiting_seq, "nadia")
    done = sagacity.resume_saga("s", held.awaiting_seq, _live())
    assert done.status is (SagaStatus.COMPENSATION_PENDING if fail else SagaStatus.COMPLETED)
    assert _clear(sagacity, "s") == []
    if fail:
        want = f"ValueError: card {MASK} declined (120)"
        assert (
            _errors(sagacity, "s", E.FAILED, E.COMPENSATION_REQUESTED, E.SAGA_ENDED)[-3:]
            == [want] * 3
        )
    else:
        executed = next(e for e in sagacity.journal.entries("s") if e.event_type is E.EXECUTED)
        assert executed.result == f"charged card {MASK}"


def test_a_resumed_async_call_echoing_the_value_is_journaled_masked() -> None:
    sagacity, _gateway, tools = _sealed("delegated")
    held = sagacity.saga("s", lambda: tools.charge(CARD, 120))
    assert held.awaiting_seq is not None
    sagacity.approve("s", held.awaiting_seq, "nadia")
    done = asyncio.run(sagacity.resume_saga_async("s", held.awaiting_seq, _live()))
    assert done.status is SagaStatus.COMPENSATION_PENDING
    assert _clear(sagacity, "s") == []
