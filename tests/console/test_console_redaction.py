"""Field-level redaction on the approval console (docs/adr/0019-erasure.md §5), in a real
browser on a sealed journal.

The agent's IRREVERSIBLE tool declares ``redact=["$.card_number"]``: the card number is never
journaled in clear, only its redaction key.  The agent writes a sealed chain (a
key-encryption key, data keys in PostgreSQL) on real Kafka; the approvals service opens it
through its own key service, configured as in production by
``SAGACITY_KEY_ENCRYPTION_KEY_FILE``.  The approver sees the card masked and the payload's
hash still matching; their approval resumes the call with the clear card; another card is
refused.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from sagacity import (
    EventType,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compose,
    verify,
)
from sagacity.chain import payload_sha256
from sagacity.consumers.approvals import ApprovalsServer
from sagacity.errors import PayloadMismatchError
from sagacity.keys import KEK_SETTING, KeyRing, KeyService, write_key_encryption_key
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._redaction import MASK, REDACTED, REDACTION_ATTRIBUTE, stored_salts
from sagacity.producer import KafkaJournal
from tests.console.conftest import (
    World,
    approve_in,
    console_settings,
    quietly,
    require_browsers,
    saga_id,
    serving,
    topic_and_schema,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
CARD = "4111111111111111"
OTHER_CARD = "5500000000000004"
HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


class Till:
    """A card terminal: its charge cannot be undone and its card number is never journaled in
    clear; it records every call it gets, with the arguments it got."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, str, int, str]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["$.card_number"])
    def charge_card(self, order: str, card_number: str, amount: int, note: str) -> str:
        self.charges.append((order, card_number, amount, note))
        return f"charged {amount} for {order}"

    def calls(self, order: str) -> list[tuple[str, str, int, str]]:
        """The charges made for ``order``."""
        return [charge for charge in self.charges if charge[0] == order]


@dataclass(frozen=True, kw_only=True)
class Sealed:
    """The console's world on a sealed journal, and the agent's till."""

    world: World
    till: Till


@pytest.fixture(scope="module")
def sealed(
    kafka_bootstrap: str, postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sealed]:
    require_browsers()
    tmp = tmp_path_factory.mktemp("redaction")
    kek = tmp / "journal.kek"
    write_key_encryption_key(kek)
    with contextlib.ExitStack() as stack:
        topic, dsn = stack.enter_context(
            topic_and_schema(kafka_bootstrap, postgres_dsn, "redaction")
        )
        settings, approvals_public = console_settings(
            tmp, dsn=dsn, bootstrap=kafka_bootstrap, topic=topic
        )
        # The service finds its key service as a deployed one does: the key-encryption key's
        # file in SAGACITY_KEY_ENCRYPTION_KEY_FILE, the data keys in SAGACITY_DATABASE_URL.
        environment = stack.enter_context(pytest.MonkeyPatch.context())
        environment.setenv(KEK_SETTING, str(kek))
        environment.setenv("SAGACITY_DATABASE_URL", dsn)
        # Registering a tool that redacts is refused on a journal that does not seal.
        server = ApprovalsServer(
            settings, dependencies=compose.approvals_of(settings), tools=[Till()]
        )
        server_keys = server.journal.keys  # type: ignore[attr-defined]
        assert isinstance(server_keys, KeyService)  # closed by the server as it stops
        url = stack.enter_context(serving(server))
        keys = KeyService(PostgresKeyStore(dsn), KeyRing.from_setting(str(kek)))
        stack.callback(quietly, keys.close)
        journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
        stack.callback(quietly, journal.close)
        agent = Sagacity(
            journal,
            compensation="delegated",
            writer_id="agent-7",
            approvals_public_key=approvals_public,
        )
        till = Till()
        agent.wrap(till)
        world = World(
            url=url,
            dsn=dsn,
            topic=topic,
            bootstrap=kafka_bootstrap,
            server=server,
            agent=agent,
            compensator=None,
            tmp=tmp,
        )
        stack.callback(world.close_browsers)
        yield Sealed(world=world, till=till)


def charge(order: str, *, card: str = CARD, note: str = "gift wrap") -> dict[str, Any]:
    """The arguments of a charge, in the tool's declaration order."""
    return {"order": order, "card_number": card, "amount": 120, "note": note}


def live(arguments: dict[str, Any]) -> str:
    """The payload the agent's process holds for a call: its arguments' compact JSON."""
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def entry_at(entries: Sequence[JournalEntry], seq: int) -> JournalEntry:
    return next(e for e in entries if e.seq == seq)


def chain_text(entries: Sequence[JournalEntry]) -> str:
    """Every field of every entry, as the agent reads them back (sealed fields opened)."""
    return json.dumps([e.to_dict() for e in entries], ensure_ascii=False)


def test_the_card_number_is_on_no_page_the_approver_sees(sealed: Sealed) -> None:
    world = sealed.world
    driver = world.sign_in("alice")
    saga = saga_id("card")
    call = charge(saga)
    seq = world.gate(saga, ("charge_card", call))
    request = entry_at(world.agent.entries(saga), seq)
    assert request.event_type is E.AWAITING_APPROVAL
    assert request.payload is not None
    assert CARD not in request.payload
    # The card's salt (sealed on the chain) stays off the pages too: with it, its redaction
    # key on the page would let anyone try card numbers until one hashes the same.
    (salt,) = stored_salts(request.attributes[REDACTION_ATTRIBUTE]).values()
    hidden = (CARD, salt)

    # The service's consumer opens the sealed request on the topic: the inbox lists it.
    def listed() -> bool:
        driver.get(f"{world.url}/ui/")
        selector = f'tr[data-saga-id="{saga}"][data-seq="{seq}"]'
        return bool(driver.find_elements(By.CSS_SELECTOR, selector))

    world.wait_for(listed, timeout=20, what="the request in the inbox")
    assert not [x for x in hidden if x in driver.page_source]

    world.open_request("alice", saga, seq)
    formatted = json.loads(driver.find_element(By.CSS_SELECTOR, ".formatted").text)
    assert formatted == {**call, "card_number": MASK}
    hint = driver.find_element(By.CSS_SELECTOR, ".redacted").text
    assert "never journaled in clear: $.card_number (shown •••• (redacted))" in hint
    # The exact bytes shown are the stored ones, the card's redaction key in its place.
    exact = driver.find_element(By.CSS_SELECTOR, ".payload").text
    assert exact == request.payload
    assert set(json.loads(exact)["card_number"]) == {REDACTED}
    # The binding holds on the redacted bytes.
    shown_hash = driver.find_element(By.CSS_SELECTOR, ".sha256").text
    assert shown_hash == payload_sha256(request.payload) == request.attributes["payload_sha256"]
    hash_line = driver.find_element(By.CSS_SELECTOR, ".hash").text
    assert "matches the request's recorded hash" in hash_line
    assert not [x for x in hidden if x in driver.page_source]

    driver.get(f"{world.url}/ui/sagas/{saga}")
    assert "charge_card" in driver.find_element(By.CSS_SELECTOR, "table.timeline").text
    assert not [x for x in hidden if x in driver.page_source]


def _approved_in_browser(sealed: Sealed, name: str) -> tuple[Any, str, dict[str, Any], int]:
    """A card charge gated on the sealed journal and approved by alice on its page: her
    browser, the saga, the call's arguments and the request's seq."""
    world = sealed.world
    driver = world.sign_in("alice")
    saga = saga_id(name)
    call = charge(saga)
    seq = world.gate(saga, ("charge_card", call))
    world.server.service.materialise(saga)
    world.open_request("alice", saga, seq)
    approve_in(driver)
    assert "Your approval is recorded" in driver.page_source
    return driver, saga, call, seq


def test_an_approval_in_the_browser_resumes_the_call_with_the_clear_card(
    sealed: Sealed,
) -> None:
    world, till = sealed.world, sealed.till
    driver, saga, call, seq = _approved_in_browser(sealed, "approve")
    assert "approved by alice@example.com" in driver.find_element(By.CSS_SELECTOR, ".decided").text
    assert CARD not in driver.page_source
    assert till.calls(saga) == []

    result = world.agent.resume_saga(saga, seq, live(call))
    assert result.status is SagaStatus.COMPLETED
    assert till.calls(saga) == [(saga, CARD, 120, "gift wrap")]
    entries = world.agent.entries(saga)
    assert [e.actor for e in entries if e.event_type is E.APPROVED] == ["alice@example.com"]
    intent = next(e for e in entries if e.event_type is E.INTENT)
    assert intent.payload == entry_at(entries, seq).payload
    assert CARD not in chain_text(entries)
    assert verify(list(entries), saga_id=saga).ok
    driver.get(f"{world.url}/ui/sagas/{saga}")
    assert "COMPLETED" in driver.find_element(By.TAG_NAME, "h1").text
    assert "verified" in driver.find_element(By.CSS_SELECTOR, ".verdict").text
    assert CARD not in driver.page_source


def test_a_resume_with_another_card_number_is_refused_and_calls_nothing(sealed: Sealed) -> None:
    world, till = sealed.world, sealed.till
    driver, saga, call, seq = _approved_in_browser(sealed, "changed")

    with pytest.raises(PayloadMismatchError, match="payload changed since approval"):
        world.agent.resume_saga(saga, seq, live({**call, "card_number": OTHER_CARD}))
    assert till.calls(saga) == []
    entries = world.agent.entries(saga)
    assert E.INTENT not in [e.event_type for e in entries]
    refused = next(e for e in entries if e.event_type is E.RESUME_REFUSED)
    assert refused.payload is not None
    assert set(json.loads(refused.payload)["card_number"]) == {REDACTED}
    assert refused.payload != entry_at(entries, seq).payload
    assert CARD not in chain_text(entries)
    assert OTHER_CARD not in chain_text(entries)
    assert verify(list(entries), saga_id=saga).ok
    driver.get(f"{world.url}/ui/sagas/{saga}")
    assert "RESUME_REFUSED" in driver.find_element(By.CSS_SELECTOR, "table.timeline").text
    assert CARD not in driver.page_source
    assert OTHER_CARD not in driver.page_source


def test_a_hostile_value_beside_the_redacted_field_renders_as_text(sealed: Sealed) -> None:
    world = sealed.world
    saga = saga_id("hostile")
    seq = world.gate(saga, ("charge_card", charge(saga, note=HOSTILE)))
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    for page in (f"/ui/requests/{saga}/{seq}", f"/ui/sagas/{saga}", "/ui/"):
        driver.get(world.url + page)
        assert driver.execute_script("return window.pwned") is None, page
        assert not driver.find_elements(By.CSS_SELECTOR, "main script, main img"), page
        assert CARD not in driver.page_source, page
    driver.get(f"{world.url}/ui/requests/{saga}/{seq}")
    formatted = json.loads(driver.find_element(By.CSS_SELECTOR, ".formatted").text)
    assert formatted["note"] == HOSTILE
    assert formatted["card_number"] == MASK


def test_the_saga_api_withholds_the_redaction_salt_and_keeps_the_exact_bytes(
    sealed: Sealed,
) -> None:
    import httpx

    from tests.console.conftest import TOKENS

    world = sealed.world
    saga = saga_id("salt")
    seq = world.gate(saga, ("charge_card", charge(saga)))
    request = entry_at(world.agent.entries(saga), seq)
    (salt,) = stored_salts(request.attributes[REDACTION_ATTRIBUTE]).values()
    answer = httpx.get(
        f"{world.url}/sagacity/sagas/{saga}",
        headers={"Authorization": f"Bearer {TOKENS['alice']}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    # With the salt, the redaction key beside it would give the card number away.
    assert salt not in answer.text
    assert CARD not in answer.text
    shown = {e["seq"]: e for e in answer.json()["entries"]}
    assert all(REDACTION_ATTRIBUTE not in e["attributes"] for e in shown.values())
    assert all(REDACTION_ATTRIBUTE not in (e.get("salts") or {}) for e in shown.values())
    # What the approver signs stays: the exact stored bytes, the redaction key in them, and
    # the attribute's commitment (the chain still verifies; the salt reads as withheld).
    assert shown[seq]["payload"] == request.payload
    assert REDACTION_ATTRIBUTE in shown[seq]["commitments"]
    assert answer.json()["verified"] is True


def test_a_narrow_approver_sees_no_saga_of_another_tool(
    sealed: Sealed,
) -> None:
    import httpx

    from tests.console.conftest import TOKENS

    world = sealed.world
    saga = saga_id("narrow")
    seq = world.gate(saga, ("charge_card", charge(saga)))
    world.server.service.materialise(saga)
    # carol decides the tool "charge" alone: this saga of charge_card does not exist for her.
    api = httpx.get(
        f"{world.url}/sagacity/sagas/{saga}",
        headers={"Authorization": f"Bearer {TOKENS['carol']}"},
        timeout=30,
    )
    assert api.status_code == 404
    carol = world.sign_in("carol")
    carol.get(f"{world.url}/ui/sagas/{saga}")
    assert carol.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert "charge_card" not in carol.page_source
    carol.get(f"{world.url}/ui/attention")
    assert saga not in carol.page_source
    world.open_request("carol", saga, seq)
    assert carol.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    assert "gift wrap" not in carol.page_source  # nothing of the request's payload


def test_an_agents_token_does_not_sign_in_to_the_console(sealed: Sealed) -> None:
    # Agents call tools (over MCP); people decide and read, here.
    world = sealed.world
    robot = world.sign_in("robot")
    assert robot.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    assert "robot@example.com is an agent principal" in robot.page_source
    assert robot.get_cookie("sagacity_session") is None


def test_an_approver_cannot_approve_his_own_agents_request_in_the_browser(sealed: Sealed) -> None:
    from sagacity.saga._scope import calling_as

    world = sealed.world
    saga = saga_id("own")
    with calling_as("robot@example.com"):  # as the MCP server journals its agent client
        seq = world.gate(saga, ("charge_card", charge(saga)))
    world.server.service.materialise(saga)
    bob = world.sign_in("bob")  # robot is bob's own agent
    world.open_request("bob", saga, seq)
    approve_in(bob)
    assert bob.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    assert "nobody decides their own request" in bob.page_source
    assert [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED] == []
