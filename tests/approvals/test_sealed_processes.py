"""Sealed sagas through the approvals and compensation services, each its own OS process, on
real Kafka and PostgreSQL (docs/adr/0019-erasure.md §3: every reader opens through the key
service; a missing key-encryption key file stops a service at start-up, another saga's key it
cannot open quarantines that saga's events)."""

from __future__ import annotations

import hashlib
import html
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import EventType, Sagacity, SagaStatus
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KafkaJournal
from sagacity.schemas import decode_record

from ._process import REPO
from .conftest import ALICE, TOKENS, bearer, shown
from .test_processes import Deployment, listed, wait_for
from .tools import calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType


@pytest.fixture
def sealed(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Deployment]:
    """A deployment whose agent seals its sagas; the services get the same key file."""
    d = Deployment(kafka_bootstrap, make_topic(partitions=3), pg_dsn, auth_file, tmp_path)
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(d.calls))
    kek = write_key_encryption_key(tmp_path / "journal.kek")
    keys = KeyService(PostgresKeyStore(pg_dsn), KeyRing((kek,)))
    d.env[KEK_SETTING] = str(tmp_path / "journal.kek")
    d.journal.close()
    d.journal = KafkaJournal(kafka_bootstrap, topic=d.env["SAGACITY_TOPIC"], keys=keys)
    d.agent = Sagacity(
        d.journal,
        compensation="delegated",
        approvals_public_key=d.env["SAGACITY_APPROVALS_PUBLIC_KEY"],
    )
    from .tools import Bank

    d.bank = d.agent.wrap(Bank())
    try:
        yield d
    finally:
        d.close()
        keys.close()


def _raw_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "raw-reader", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
        consumer.assign(parts)
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        values: list[bytes] = []
        seen = dict.fromkeys(ends, 0)
        while any(seen[p] < ends[p] for p in ends):
            message = consumer.poll(2)
            if message is None or message.error():
                continue
            values.append(message.value() or b"")
            seen[message.partition() or 0] = (message.offset() or 0) + 1
        return values
    finally:
        consumer.close()


def test_a_sealed_saga_is_approved_with_its_exact_payload_and_resumed(sealed: Deployment) -> None:
    replica = sealed.replica()
    replica.wait_ready()
    seq = sealed.gate("sealed-wire")
    [request] = wait_for(lambda: listed(replica))
    # The topic holds the payload sealed; the service shows the opened bytes, bound by hash.
    assert all(
        b"alice" not in value
        for value in _raw_values(
            sealed.env["SAGACITY_BOOTSTRAP_SERVERS"], sealed.env["SAGACITY_TOPIC"]
        )
    )
    assert (request["saga_id"], request["seq"], request["payload"]) == ("sealed-wire", seq, ALICE)
    assert request["payload_sha256"] == hashlib.sha256(ALICE.encode()).hexdigest()
    url = replica.url
    assert httpx.post(
        f"{url}/sagacity/approve/sealed-wire/{seq}",
        json=shown(url, "sealed-wire", seq),
        headers=bearer("alice"),
    ).is_success
    done = httpx.post(
        f"{url}/sagacity/resume/sealed-wire/{seq}",
        json={"payload": ALICE},
        headers=bearer("alice"),
        timeout=30,
    )
    assert done.status_code == 200, done.text
    assert done.json()["saga_status"] == "COMPLETED"
    assert sealed.wires() == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]
    assert sealed.kinds("sealed-wire")[-4:] == ["APPROVED", "INTENT", "EXECUTED", "SAGA_ENDED"]
    [intent] = [e for e in sealed.entries("sealed-wire", E.INTENT) if e.seq > seq]
    assert intent.form == 2
    assert intent.payload == ALICE


def test_a_refused_sealed_saga_is_compensated_with_its_undo_arguments_opened(
    sealed: Deployment,
) -> None:
    replica = sealed.replica()
    replica.wait_ready()
    seq = sealed.gate("sealed-refused")
    wait_for(lambda: listed(replica))
    assert httpx.post(
        f"{replica.url}/sagacity/reject/sealed-refused/{seq}", headers=bearer("alice")
    ).is_success
    sealed.compensation_service()
    outcome = sealed.agent.wait_for_outcome("sealed-refused", timeout=60)
    assert outcome.status is SagaStatus.REJECTED, sealed.kinds("sealed-refused")
    [undone] = sealed.entries("sealed-refused", E.COMPENSATED)
    assert outcome.compensated == (undone.ref_seq,)
    assert undone.form == 2
    [released] = [c for c in calls(sealed.calls) if c["tool"] == "release_inventory"]
    assert released == {"tool": "release_inventory", "sku": "SKU-9", "held": "held-SKU-9"}
    assert sealed.wires() == []


def _serve(service: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = {
        "approvals": ["--auth", env["AUTH"], "--tools", "tests.approvals.tools:Bank"],
        "compensation": [
            "--tools",
            "tests.approvals.tools:BANK",
            "--bootstrap-servers",
            env["SAGACITY_BOOTSTRAP_SERVERS"],
            "--database-url",
            env["SAGACITY_DATABASE_URL"],
            "--topic",
            env["SAGACITY_TOPIC"],
        ],
    }[service]
    return subprocess.run(
        [sys.executable, "-c", "from sagacity.cli import main; main()", "serve", service, *args],
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("service", ["approvals", "compensation"])
def test_a_service_refuses_to_start_with_a_missing_key_file_not_with_anothers_keys(
    sealed: Deployment, auth_file: Path, tmp_path: Path, service: str
) -> None:
    # Its own key file missing is the process's configuration: it refuses to start, naming it.
    sealed.gate("sealed-first")
    env = {**sealed.env, KEK_SETTING: str(tmp_path / "missing.kek"), "AUTH": str(auth_file)}
    done = _serve(service, env)
    assert done.returncode != 0, (service, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, (service, done.stderr)
    assert KEK_SETTING in errors[0], (service, done.stderr)
    if service != "approvals":
        return  # the compensation service: tests/compensation/test_unopenable_keys.py
    # Data keys under a KEK it does not hold are other sagas' data: it starts, says so on
    # its health endpoint, and quarantines those sagas' events.
    other = tmp_path / "other.kek"
    write_key_encryption_key(other)
    sealed.env[KEK_SETTING] = str(other)
    replica = sealed.replica()
    replica.wait_ready()
    health = httpx.get(f"{replica.url}/healthz", timeout=10).json()
    assert health["unheld_key_encryption_keys"], health
    wait_for(
        lambda: httpx.get(f"{replica.url}/healthz", timeout=10).json().get("quarantined"),
        timeout=60,
    )
    assert listed(replica) == []


def test_a_sealed_field_that_fails_authentication_is_dead_lettered_as_sent(
    sealed: Deployment,
) -> None:
    bootstrap, topic = sealed.env["SAGACITY_BOOTSTRAP_SERVERS"], sealed.env["SAGACITY_TOPIC"]
    replica = sealed.replica()
    replica.wait_ready()
    sealed.compensation_service()
    sealed.gate("sealed-altered")
    [value] = [
        v
        for v in _raw_values(bootstrap, topic)
        if (record := decode_record(v))["saga_id"] == "sealed-altered"
        and record["event_type"] == "INTENT"
        and record["tool"] == "reserve_inventory"
    ]
    box = decode_record(value)["sealed"]["payload"]
    altered = bytearray(value)
    altered[value.index(box) + len(box) // 2] ^= 1
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"sealed-altered", value=bytes(altered))
    producer.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([f"{topic}.dlq"])
    try:
        deadline = time.monotonic() + 60
        message = None
        while message is None and time.monotonic() < deadline:
            polled = consumer.poll(1)
            if polled is not None and not polled.error():
                message = polled
    finally:
        consumer.close()
    assert message is not None, "nothing was dead-lettered"
    headers = dict(message.headers() or [])
    assert headers["sagacity.dlq.reason"] == b"authentication failed"
    assert message.value() == bytes(altered)
    assert message.key() == b"sealed-altered"
    # The approvals consumer quarantines it with its reason (counted), folding the rest.
    quarantined = 'sagacity_approvals_consumer_events_total{outcome="quarantined"} 1.0'
    wait_for(lambda: quarantined in httpx.get(f"{replica.url}/metrics").text)
    assert httpx.get(f"{replica.url}/healthz").json()["quarantined"] == 1
    assert [r["saga_id"] for r in listed(replica)] == ["sealed-altered"]


def test_the_console_shows_a_sealed_requests_opened_payload(sealed: Deployment) -> None:
    replica = sealed.replica()
    replica.wait_ready()
    seq = sealed.gate("sealed-console")
    wait_for(lambda: listed(replica))
    with httpx.Client(base_url=replica.url, timeout=10) as browser:
        form = browser.get("/ui/login")
        found = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert found is not None, form.text
        signed_in = browser.post(
            "/ui/login", data={"csrf": found.group(1), "token": TOKENS["alice"], "next": "/ui/"}
        )
        assert signed_in.status_code in (200, 303), signed_in.text
        page = browser.get(f"/ui/requests/sealed-console/{seq}")
    assert page.status_code == 200, page.text
    shown = re.search(r'<pre class="payload">(.*?)</pre>', page.text, re.S)
    assert shown is not None, page.text
    assert html.unescape(shown.group(1)) == ALICE
    assert '<span class="ok">matches the request' in page.text
    assert "does NOT match" not in page.text


CARD = "4111111111111111"
OTHER_CARD = "5500000000000004"


def _card_payload(card: str) -> str:
    return '{"card_number":"' + card + '","amount":"120"}'


def test_a_redacted_card_number_is_approved_by_its_key_and_resumed_with_the_live_value(
    sealed: Deployment,
) -> None:
    """ADR 0019 §5 through the approvals service: the request it lists holds the redaction
    key, not the card number; the resume takes the live payload and runs the clear value; a
    changed card number is refused; the card number is in no topic message and no table."""
    from .tools import Cards

    cards = sealed.agent.wrap(Cards())
    replica = sealed.replica("--tools", "tests.approvals.tools:Cards")
    replica.wait_ready()
    sagas = {}
    for saga in ("card-ok", "card-changed"):
        result = sealed.agent.saga(saga, lambda: cards.charge_card(CARD, "120"))
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        sagas[saga] = result.awaiting_seq

    def both_listed() -> list[dict[str, Any]]:
        requests = [r for r in listed(replica) if r["tool"] == "charge_card"]
        return requests if len(requests) == 2 else []

    # The service materialises each request as its consumer reaches it: wait for both.
    requests = wait_for(both_listed)
    assert len(requests) == 2
    for request in requests:
        assert CARD not in request["payload"]
        assert '"card_number":{"$redacted":"' in request["payload"]
        assert request["payload_sha256"] == hashlib.sha256(request["payload"].encode()).hexdigest()
    url = replica.url
    for saga, seq in sagas.items():
        assert httpx.post(
            f"{url}/sagacity/approve/{saga}/{seq}",
            json=shown(url, saga, seq),
            headers=bearer("bob"),
        ).is_success
    done = httpx.post(
        f"{url}/sagacity/resume/card-ok/{sagas['card-ok']}",
        json={"payload": _card_payload(CARD)},
        headers=bearer("bob"),
        timeout=30,
    )
    assert done.status_code == 200, done.text
    assert done.json()["saga_status"] == "COMPLETED"
    changed = httpx.post(
        f"{url}/sagacity/resume/card-changed/{sagas['card-changed']}",
        json={"payload": _card_payload(OTHER_CARD)},
        headers=bearer("bob"),
        timeout=30,
    )
    assert changed.status_code >= 400, changed.text
    assert "payload changed since approval" in changed.text
    charged = [c for c in calls(sealed.calls) if c["tool"] == "charge_card"]
    assert charged == [{"tool": "charge_card", "card_number": CARD, "amount": "120"}]
    assert "RESUME_REFUSED" in sealed.kinds("card-changed")
    # Nowhere in clear: the topic, the approvals service's tables.
    values = _raw_values(sealed.env["SAGACITY_BOOTSTRAP_SERVERS"], sealed.env["SAGACITY_TOPIC"])
    assert not any(card.encode() in v for v in values for card in (CARD, OTHER_CARD))
    import psycopg

    with psycopg.connect(sealed.env["SAGACITY_DATABASE_URL"]) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            ).fetchall()
        ]
        dumped = [
            r[0]
            for t in tables
            for r in conn.execute(f'SELECT row_to_json(x)::text FROM "{t}" x').fetchall()
        ]
    assert dumped
    assert [row for row in dumped if CARD in row or OTHER_CARD in row] == []
