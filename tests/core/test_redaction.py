"""Field-level redaction at write time (docs/adr/0019-erasure.md §5): the redaction key, the
paths, the declaration, the start-up refusal and the approval binding over redacted bytes."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from pathlib import Path
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
from sagacity.chain import committing, payload_sha256
from sagacity.errors import (
    ConfigurationError,
    DeclarationError,
    PayloadMismatchError,
    PolicyError,
    SerializationError,
)
from sagacity.policy import Policy
from sagacity.privacy._redaction import (
    MASK,
    REDACTED,
    masked,
    redact,
    redact_paths,
    redaction_key,
    stored_salts,
)

E = EventType
CARD = "4111111111111111"
OTHER_CARD = "5500000000000004"
SALT = bytes(range(32))


def _f(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


# --- the redaction key ---------------------------------------------------------------------------


def test_the_redaction_key_is_sha256_over_the_framed_fields() -> None:
    value = {"iban": "DE89 3704", "b": [1, "é"]}
    canonical = '{"b":[1,"é"],"iban":"DE89 3704"}'.encode()
    expected = hashlib.sha256(
        b"SGR1" + _f(b"pay") + _f(b"$.customer") + _f(SALT) + _f(canonical)
    ).digest()
    assert redaction_key("pay", "$.customer", SALT, value) == expected


VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "redaction-v1.json").read_text("utf-8")
)


@pytest.mark.parametrize("case", VECTORS["keys"], ids=lambda c: c["name"])
def test_the_redaction_vectors(case: dict[str, Any]) -> None:
    """``tests/vectors/redaction-v1.json``, recomputed from the ADR's definition and by the
    writer."""
    salt = bytes.fromhex(case["salt"])
    canonical = json.dumps(case["value"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical == case["canonical_json"]
    preimage = (
        b"SGR1"
        + _f(case["tool"].encode())
        + _f(case["path"].encode())
        + _f(salt)
        + _f(canonical.encode())
    )
    assert hashlib.sha256(preimage).hexdigest() == case["k_r"]
    assert redaction_key(case["tool"], case["path"], salt, case["value"]).hex() == case["k_r"]


@pytest.mark.parametrize("case", VECTORS["payloads"], ids=lambda c: c["name"])
def test_the_redacted_payload_vectors(case: dict[str, Any]) -> None:
    out = redact(case["tool"], case["payload"], case["paths"], case["salts"])
    assert out.payload == case["redacted"]
    assert out.attribute == case["redaction"]


def test_the_redaction_key_depends_on_every_input() -> None:
    base = redaction_key("pay", "$.card_number", SALT, CARD)
    assert redaction_key("refund", "$.card_number", SALT, CARD) != base
    assert redaction_key("pay", "$.card", SALT, CARD) != base
    assert redaction_key("pay", "$.card_number", bytes(32), CARD) != base
    assert redaction_key("pay", "$.card_number", SALT, OTHER_CARD) != base


def test_a_salt_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(SerializationError, match="32 bytes"):
        redaction_key("pay", "$.card_number", b"short", CARD)


# --- paths ---------------------------------------------------------------------------------------


def test_paths_are_kept_in_their_dollar_spelling() -> None:
    assert redact_paths(["card_number", "$.customer.iban"]) == (
        "$.card_number",
        "$.customer.iban",
    )


@pytest.mark.parametrize(
    ("paths", "reason"),
    [
        ("card_number", "a list of fields"),
        ([3], "is a str"),
        (["$card"], "neither a top-level name"),
        (["$.a..b"], "empty key"),
        ([""], "empty key"),
        (["a.b"], "top-level name has no dot"),
        (["card_number", "$.card_number"], "twice or inside"),
        (["$.customer", "$.customer.iban"], "twice or inside"),
    ],
)
def test_malformed_paths_are_refused_at_declaration(paths: object, reason: str) -> None:
    with pytest.raises(DeclarationError, match=reason):
        redact_paths(paths)


def test_a_redacted_field_is_replaced_and_the_rest_kept_in_order() -> None:
    payload = json.dumps(
        {"amount": 10, "card_number": CARD, "customer": {"name": "Ada", "iban": "DE89"}},
        separators=(",", ":"),
    )
    out = redact("pay", payload, ("$.card_number", "$.customer.iban"))
    document = json.loads(out.payload)
    assert list(document) == ["amount", "card_number", "customer"]
    assert document["amount"] == 10
    assert document["customer"]["name"] == "Ada"
    salts = {path: bytes.fromhex(s) for path, s in out.salts.items()}
    assert document["card_number"] == {
        REDACTED: redaction_key("pay", "$.card_number", salts["$.card_number"], CARD).hex()
    }
    assert document["customer"]["iban"] == {
        REDACTED: redaction_key("pay", "$.customer.iban", salts["$.customer.iban"], "DE89").hex()
    }
    assert CARD not in out.payload
    assert "DE89" not in out.payload
    assert stored_salts(out.attribute) == dict(out.salts)
    # The same salts give the same text: what a resumer compares.
    assert redact("pay", payload, ("$.card_number", "$.customer.iban"), out.salts) == out


def test_a_missing_path_redacts_nothing() -> None:
    payload = '{"amount":10,"customer":null}'
    out = redact("pay", payload, ("$.card_number", "$.customer.iban", "$.shipping.iban"))
    assert out.payload == payload
    assert out.salts == {}
    assert out.attribute is None


def test_a_path_into_a_non_object_is_a_clear_error() -> None:
    with pytest.raises(SerializationError, match=r"\$\.customer is a str, not an object"):
        redact("pay", '{"customer":"Ada"}', ("$.customer.iban",))
    with pytest.raises(SerializationError, match=r"\$\.customer is a list"):
        redact("pay", '{"customer":[{"iban":"x"}]}', ("$.customer.iban",))


def test_the_console_mask_replaces_redacted_values_only() -> None:
    document = {"card": {REDACTED: "ab" * 32}, "nested": {"x": [{REDACTED: "cd"}]}, "n": 1}
    assert masked(document) == {"card": MASK, "nested": {"x": [MASK]}, "n": 1}
    assert masked({REDACTED: "ab", "other": 1}) == {REDACTED: "ab", "other": 1}


# --- declaration ---------------------------------------------------------------------------------


def test_compensable_records_the_redacted_paths() -> None:
    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["card_number"])
    def charge(card_number: str, amount: int) -> str:
        return "ok"

    definition = charge.__sagacity_tool__  # type: ignore[attr-defined]
    assert definition.redact == ("$.card_number",)


def test_compensable_refuses_a_malformed_path_at_decoration() -> None:
    with pytest.raises(DeclarationError, match="empty key"):
        compensable(redact=["$."])


def test_a_toml_policy_names_fields_to_redact() -> None:
    policy = Policy.loads(
        '[tools]\npay = { reversibility = "IRREVERSIBLE", '
        'redact = ["card_number", "$.customer.iban"] }\n'
    )
    resolution = policy.resolve("pay")
    assert resolution is not None
    assert resolution.rule.redact == ("$.card_number", "$.customer.iban")


@pytest.mark.parametrize(
    ("value", "reason"),
    [('"card_number"', "a list of fields"), ('["$.a", "$.a.b"]', "twice or inside")],
)
def test_a_toml_policy_with_a_bad_redact_is_refused_with_its_line(value: str, reason: str) -> None:
    text = (
        f'[tools]\nsearch = "READ"\npay = {{ reversibility = "IRREVERSIBLE", redact = {value} }}\n'
    )
    with pytest.raises(PolicyError, match=reason) as caught:
        Policy.loads(text)
    assert caught.value.line == 3


# --- the journal must seal -----------------------------------------------------------------------


class Shop:
    def __init__(self) -> None:
        self.charges: list[tuple[str, int]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["card_number"])
    def charge(self, card_number: str, amount: int) -> str:
        self.charges.append((card_number, amount))
        return "charged"


def test_a_tool_with_fields_to_redact_is_refused_at_start_up_without_a_key_service() -> None:
    sagacity = Sagacity(InMemoryJournal())
    with pytest.raises(ConfigurationError, match="SAGACITY_KEY_ENCRYPTION_KEY_FILE") as caught:
        sagacity.wrap(Shop())
    assert "'charge' redacts $.card_number" in caught.value.message
    assert "charge" not in sagacity.registry


def test_a_form_1_journal_refuses_a_redacted_entry() -> None:
    journal = InMemoryJournal()
    draft = EntryDraft(
        saga_id="s",
        event_type=E.INTENT,
        tool="charge",
        payload="{}",
        attributes={"redaction": json.dumps({"$.card_number": SALT.hex()})},
    )
    with pytest.raises(SerializationError, match="chain form 1"):
        journal.append(draft)
    assert journal.entries("s") == ()


class SealingMemoryJournal(InMemoryJournal):
    """A unit-test stand-in for a journal with a key service: it writes chain form 2 (the
    sealing itself is the Kafka journal's, tested on the real stack)."""

    seals = True

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return super().append(committing(draft), durable=durable)


def _gated(sagacity: Sagacity, shop: Any, card: str) -> tuple[str, int]:
    result = sagacity.saga("order-1", lambda: shop.charge(card, 120))
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    return result.saga_id, result.awaiting_seq


def _texts(entries: Sequence[JournalEntry]) -> str:
    return json.dumps([e.to_dict() for e in entries])


@pytest.fixture
def sealed() -> tuple[Sagacity, Shop, Any]:
    sagacity = Sagacity(SealingMemoryJournal())
    shop = Shop()
    return sagacity, shop, sagacity.wrap(shop)


def test_the_request_journals_the_redacted_payload_and_binds_it(
    sealed: tuple[Sagacity, Shop, Any],
) -> None:
    sagacity, _shop, wrapped = sealed
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    request = sagacity.journal.entries(saga_id)[seq - 1]
    assert request.event_type is E.AWAITING_APPROVAL
    assert request.payload is not None
    assert CARD not in _texts(sagacity.journal.entries(saga_id))
    assert json.loads(request.payload)["card_number"].keys() == {REDACTED}
    assert request.attributes["payload_sha256"] == payload_sha256(request.payload)
    assert set(stored_salts(request.attributes["redaction"])) == {"$.card_number"}
    assert set(request.commitments) == {"payload", "redaction"}
    assert verify(sagacity.journal.entries(saga_id)).ok


def test_a_resume_with_the_live_payload_runs_the_clear_value(
    sealed: tuple[Sagacity, Shop, Any],
) -> None:
    sagacity, shop, wrapped = sealed
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    sagacity.approve(saga_id, seq, "nadia")
    live = json.dumps({"card_number": CARD, "amount": 120}, separators=(",", ":"))
    result = sagacity.resume_saga(saga_id, seq, live)
    assert result.status is SagaStatus.COMPLETED
    assert shop.charges == [(CARD, 120)]
    entries = sagacity.journal.entries(saga_id)
    intent = next(e for e in entries if e.event_type is E.INTENT)
    assert intent.payload == entries[seq - 1].payload
    assert intent.attributes["redaction"] == entries[seq - 1].attributes["redaction"]
    assert CARD not in _texts(entries)
    assert verify(entries).ok


@pytest.mark.parametrize(
    "live",
    [
        json.dumps({"card_number": OTHER_CARD, "amount": 120}, separators=(",", ":")),
        json.dumps({"card_number": CARD, "amount": 120}),  # the same values, other bytes
        json.dumps({"card_number": CARD, "amount": 120, "note": "x"}, separators=(",", ":")),
    ],
)
def test_a_changed_redacted_payload_is_refused_and_never_journaled_in_clear(
    sealed: tuple[Sagacity, Shop, Any], live: str
) -> None:
    sagacity, shop, wrapped = sealed
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    sagacity.approve(saga_id, seq, "nadia")
    with pytest.raises(PayloadMismatchError, match="payload changed since approval"):
        sagacity.resume_saga(saga_id, seq, live)
    assert shop.charges == []
    entries = sagacity.journal.entries(saga_id)
    refused = next(e for e in entries if e.event_type is E.RESUME_REFUSED)
    assert refused.payload is not None
    assert json.loads(refused.payload)["card_number"].keys() == {REDACTED}
    assert refused.attributes["payload_sha256"] == payload_sha256(refused.payload)
    assert CARD not in _texts(entries)
    assert OTHER_CARD not in _texts(entries)
    assert verify(entries).ok


def test_a_live_payload_that_is_not_a_json_object_is_refused_without_its_text(
    sealed: tuple[Sagacity, Shop, Any],
) -> None:
    sagacity, shop, wrapped = sealed
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    sagacity.approve(saga_id, seq, "nadia")
    with pytest.raises(PayloadMismatchError):
        sagacity.resume_saga(saga_id, seq, f"card {CARD}")
    assert shop.charges == []
    refused = next(e for e in sagacity.journal.entries(saga_id) if e.event_type is E.RESUME_REFUSED)
    assert refused.payload is None
    assert CARD not in _texts(sagacity.journal.entries(saga_id))


def test_a_call_with_a_path_into_a_non_object_is_refused_before_anything_is_journaled() -> None:
    sagacity = Sagacity(SealingMemoryJournal())

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["$.customer.iban"])
    def pay(customer: object) -> str:
        return "paid"

    wrapped = sagacity.wrap(pay)
    result = sagacity.saga("order-2", lambda: wrapped("Ada"))
    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert result.error.startswith("SerializationError: ")
    assert "$.customer is a str, not an object" in result.error
    kinds = [e.event_type for e in sagacity.journal.entries("order-2")]
    assert E.AWAITING_APPROVAL not in kinds
    assert E.INTENT not in kinds


class Till:
    def __init__(self) -> None:
        self.payments: list[tuple[str, object]] = []

    def pay(self, card_number: str, customer: object = None) -> str:
        self.payments.append((card_number, customer))
        return "paid"


def _till_tool(sagacity: Sagacity, till: Till, *, redact: list[str]) -> Any:
    return sagacity.wrap_tool(
        till.pay, name="pay", reversibility=Reversibility.IRREVERSIBLE, redact=redact
    )


def test_a_refusal_redacts_a_field_the_request_did_not_have() -> None:
    journal = SealingMemoryJournal()
    sagacity = Sagacity(journal)
    till = Till()
    pay = _till_tool(sagacity, till, redact=["card_number", "$.customer.iban"])
    result = sagacity.saga("till-1", lambda: pay(CARD))
    assert result.awaiting_seq is not None
    sagacity.approve("till-1", result.awaiting_seq, "nadia")
    live = json.dumps({"card_number": CARD, "customer": {"iban": "DE89"}}, separators=(",", ":"))
    with pytest.raises(PayloadMismatchError):
        sagacity.resume_saga("till-1", result.awaiting_seq, live)
    entries = journal.entries("till-1")
    refused = next(e for e in entries if e.event_type is E.RESUME_REFUSED)
    assert refused.payload is not None
    assert json.loads(refused.payload)["customer"]["iban"].keys() == {REDACTED}
    assert set(stored_salts(refused.attributes["redaction"])) == {
        "$.card_number",
        "$.customer.iban",
    }
    assert "DE89" not in _texts(entries)
    assert till.payments == []


def test_a_request_journaled_before_its_tool_redacted_resumes_as_it_was_approved() -> None:
    journal = SealingMemoryJournal()
    before = Sagacity(journal)
    till = Till()
    pay = _till_tool(before, till, redact=[])
    result = before.saga("till-2", lambda: pay(CARD))
    assert result.awaiting_seq is not None
    before.approve("till-2", result.awaiting_seq, "nadia")
    after = Sagacity(journal)
    _till_tool(after, till, redact=["card_number"])
    live = json.dumps({"card_number": CARD, "customer": None}, separators=(",", ":"))
    assert after.resume_saga("till-2", result.awaiting_seq, live).status is SagaStatus.COMPLETED
    assert till.payments == [(CARD, None)]
    entries = journal.entries("till-2")
    intent = next(e for e in entries if e.event_type is E.INTENT)
    assert intent.payload == entries[result.awaiting_seq - 1].payload == live
    assert "redaction" not in intent.attributes


class FormOneSealingJournal(InMemoryJournal):
    """A journal with a key service continuing a saga written in chain form 1 (opened without
    one, or by an older writer): it writes form 1."""

    seals = True


def test_a_form_1_saga_refuses_a_redacted_call_and_its_refusal_journals_no_payload() -> None:
    journal = FormOneSealingJournal()
    till = Till()
    before = Sagacity(journal)
    plain = _till_tool(before, till, redact=[])
    result = before.saga("till-3", lambda: plain(CARD))
    assert result.awaiting_seq is not None
    before.approve("till-3", result.awaiting_seq, "nadia")

    after = Sagacity(journal)
    redacting = _till_tool(after, till, redact=["card_number"])
    refused_call = after.saga("till-4", lambda: redacting(CARD))
    assert refused_call.error is not None
    assert "chain form 1" in refused_call.error
    assert [e.event_type for e in journal.entries("till-4")][-1] is E.SAGA_ENDED
    assert E.AWAITING_APPROVAL not in [e.event_type for e in journal.entries("till-4")]

    live = json.dumps({"card_number": OTHER_CARD, "customer": None}, separators=(",", ":"))
    with pytest.raises(PayloadMismatchError):
        after.resume_saga("till-3", result.awaiting_seq, live)
    refused = next(e for e in journal.entries("till-3") if e.event_type is E.RESUME_REFUSED)
    assert refused.payload is None
    assert "payload_sha256" not in refused.attributes
    assert OTHER_CARD not in _texts(journal.entries("till-3"))
    assert till.payments == []


def test_the_mcp_server_reports_the_journaled_hash_of_a_redacted_request(
    sealed: tuple[Sagacity, Shop, Any],
) -> None:
    """An MCP client told ``payload_sha256`` gets the one the approval binds: over the
    redacted payload, which only the journal holds."""
    pytest.importorskip("mcp")
    from sagacity.adapters.mcp._server import SagacityMCP

    sagacity, _shop, wrapped = sealed
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    server = SagacityMCP(sagacity)
    registered = sagacity.registry.get("charge")
    assert registered is not None
    digest = server._journaled_sha256(saga_id, seq)
    request = sagacity.journal.entries(saga_id)[seq - 1]
    assert digest == request.attributes["payload_sha256"]
    shown = server._awaiting(registered, saga_id, seq, {"card_number": CARD, "amount": 120}, digest)
    assert shown.structured_content is not None
    assert shown.structured_content["payload_sha256"] == payload_sha256(request.payload or "")


def test_a_compensation_reads_the_redacted_arguments_and_undoes_by_id() -> None:
    """An undo never gets a redacted value from the journal: it finds it by the id its call
    returned (ADR 0019 §5)."""
    from sagacity import CompensationContext, compensation

    class Holds:
        def __init__(self) -> None:
            self.held: dict[str, str] = {}
            self.contexts: list[CompensationContext] = []

        @compensable(by="release", redact=["card_number"])
        def hold(self, card_number: str, amount: int) -> dict[str, str]:
            self.held["h-1"] = card_number
            return {"hold_id": "h-1"}

        @compensation
        def release(self, context: CompensationContext) -> None:
            self.contexts.append(context)
            self.held.pop(context.result["hold_id"])

    sagacity = Sagacity(SealingMemoryJournal())
    holds = Holds()
    tools = sagacity.wrap(holds)

    def work() -> None:
        tools.hold(CARD, 120)
        raise RuntimeError("the order was cancelled")

    result = sagacity.saga("hold-1", work)
    assert result.status is SagaStatus.COMPENSATED
    assert holds.held == {}
    (context,) = holds.contexts
    assert context.arguments["card_number"].keys() == {REDACTED}
    assert context.arguments["amount"] == 120
    assert CARD not in context.payload
    assert CARD not in _texts(sagacity.journal.entries("hold-1"))


class UnopenedSaltsJournal(SealingMemoryJournal):
    """Reads entries as a reader without the key service would: the ``redaction`` attribute
    sealed, its commitment only."""

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        import dataclasses

        out = []
        for entry in super().entries(saga_id):
            if "redaction" in entry.attributes:
                entry = dataclasses.replace(
                    entry,
                    attributes={k: v for k, v in entry.attributes.items() if k != "redaction"},
                    salts={k: v for k, v in entry.salts.items() if k != "redaction"},
                )
            out.append(entry)
        return tuple(out)


def test_a_resume_that_cannot_open_the_salts_leaves_the_request_pending() -> None:
    from sagacity.errors import UnverifiableApprovalError

    journal = UnopenedSaltsJournal()
    sagacity = Sagacity(journal)
    shop = Shop()
    wrapped = sagacity.wrap(shop)
    saga_id, seq = _gated(sagacity, wrapped, CARD)
    sagacity.approve(saga_id, seq, "nadia")
    before = len(journal.entries(saga_id))
    live = json.dumps({"card_number": CARD, "amount": 120}, separators=(",", ":"))
    with pytest.raises(UnverifiableApprovalError, match="SAGACITY_KEY_ENCRYPTION_KEY_FILE"):
        sagacity.resume_saga(saga_id, seq, live)
    assert len(journal.entries(saga_id)) == before
    assert shop.charges == []
    assert [r.seq for r in sagacity.journal.pending_approvals(saga_id)] == [seq]
