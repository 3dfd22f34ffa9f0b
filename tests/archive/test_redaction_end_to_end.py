"""Field-level redaction on real Kafka and PostgreSQL (docs/adr/0019-erasure.md §5): a card
number a tool redacts is in no raw topic message, no archive column and no export bundle; the
chain verifies; the approval binds the redacted payload and a changed card number at resume
is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from sagacity import EventType, Reversibility, Sagacity, SagaStatus, compensable, verify
from sagacity.chain import payload_sha256
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.errors import ConfigurationError, PayloadMismatchError
from sagacity.postgres import PostgresKeyStore
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.privacy._redaction import REDACTED, stored_salts
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal
from sagacity.schemas import JOURNAL_WIRE
from sagacity.signing._decision_signature import DecisionSigner

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

E = EventType
CARD = "4111111111111111"
OTHER_CARD = "5500000000000004"
IBAN = "DE89370400440532013000"
ADA = {"name": "Ada", "iban": IBAN}
ROOT = Path(__file__).resolve().parents[2]


class Payments:
    def __init__(self) -> None:
        self.charges: list[tuple[str, str, int]] = []

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE, redact=["card_number", "$.customer.iban"]
    )
    def charge(self, card_number: str, customer: dict[str, str], amount: int) -> str:
        self.charges.append((card_number, customer["iban"], amount))
        return f"charged {amount}"


def _live(card: str) -> str:
    return json.dumps(
        {"card_number": card, "customer": {"name": "Ada", "iban": IBAN}, "amount": 120},
        separators=(",", ":"),
    )


def _raw(bootstrap: str, topic: str) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while len(out) < high and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        assert len(out) == high
        return out
    finally:
        consumer.close()


def _secrets_in(data: bytes | str) -> list[str]:
    text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    found = [s for s in (CARD, OTHER_CARD, IBAN) if s in text or s.encode() in raw]
    return found


def test_a_redacted_card_number_is_never_journaled_and_the_binding_holds(
    kafka_bootstrap: str, make_topic: Callable[..., str], archive_dsn: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    keys = KeyService(
        PostgresKeyStore(archive_dsn),
        KeyRing((write_key_encryption_key(tmp_path / "journal.kek"),)),
    )
    journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
    try:
        sagacity = Sagacity(journal, decision_signer=DecisionSigner.ephemeral())
        payments = Payments()
        tools = sagacity.wrap(payments)

        # The approved payload runs with the clear card number; the journal has none.
        paid = sagacity.saga("pay-1", lambda: tools.charge(CARD, ADA, 120))
        assert paid.status is SagaStatus.AWAITING_APPROVAL
        assert paid.awaiting_seq is not None
        sagacity.approve("pay-1", paid.awaiting_seq, "nadia")
        done = sagacity.resume_saga("pay-1", paid.awaiting_seq, _live(CARD))
        assert done.status is SagaStatus.COMPLETED
        assert payments.charges == [(CARD, IBAN, 120)]

        # A changed card number is a changed payload: refused, the tool never called.
        held = sagacity.saga("pay-2", lambda: tools.charge(CARD, ADA, 120))
        assert held.awaiting_seq is not None
        sagacity.approve("pay-2", held.awaiting_seq, "nadia")
        with pytest.raises(PayloadMismatchError, match="payload changed since approval"):
            sagacity.resume_saga("pay-2", held.awaiting_seq, _live(OTHER_CARD))
        assert payments.charges == [(CARD, IBAN, 120)]
        journal.flush()

        # Read back through the key service: form 2, verified, the request binds the
        # redacted bytes and carries the salts; the refusal journaled its redaction only.
        for saga in ("pay-1", "pay-2"):
            entries = journal.reader.read(saga).entries
            assert verify(entries).ok
            assert all(e.form == 2 for e in entries)
            assert _secrets_in(json.dumps([e.to_dict() for e in entries])) == []
            request = next(e for e in entries if e.event_type is E.AWAITING_APPROVAL)
            assert request.payload is not None
            assert request.attributes["payload_sha256"] == payload_sha256(request.payload)
            assert set(stored_salts(request.attributes["redaction"])) == {
                "$.card_number",
                "$.customer.iban",
            }
            assert json.loads(request.payload)["card_number"].keys() == {REDACTED}
        refused = next(
            e for e in journal.reader.read("pay-2").entries if e.event_type is E.RESUME_REFUSED
        )
        assert refused.payload is not None
        assert json.loads(refused.payload)["card_number"].keys() == {REDACTED}
        assert refused.attributes["payload_sha256"] != request.attributes["payload_sha256"]
    finally:
        journal.close()

    # No raw message on the topic holds a card number or the IBAN (nor the salts: sealed).
    messages = _raw(kafka_bootstrap, topic)
    assert len(messages) >= 12
    assert [m.offset() for m in messages if _secrets_in(m.value() or b"")] == []
    salts = stored_salts(request.attributes["redaction"])
    assert not any(s.encode() in (m.value() or b"") for m in messages for s in salts.values())

    # The archive, opening the sealed events with the keys, stores none of them either.
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        keys=keys,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        raw = [
            RawEvent(topic=topic, partition=0, offset=m.offset(), key=m.key(), value=m.value())
            for m in messages
        ]
        assert archiver.archive(raw).archived == len(messages)
    finally:
        archiver.close()
        keys.close()
    with psycopg.connect(archive_dsn) as conn:
        rows = conn.execute(
            "SELECT row_to_json(j)::text FROM side_effect_journal j ORDER BY saga_id, seq"
        ).fetchall()
        quarantined = conn.execute("SELECT count(*) FROM archive_quarantine").fetchone()
    assert len(rows) == len(messages)
    assert quarantined == (0,)
    assert [r for r in rows if _secrets_in(r[0])] == []
    assert any('\\"$redacted\\"' in r[0] or '"$redacted"' in r[0] for r in rows)

    # An export bundle holds none of them and verifies.
    out = tmp_path / "bundle"
    exported = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sagacity.cli import main; main()",
            "export",
            "--database-url",
            archive_dsn,
            "--saga",
            "pay-1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert _secrets_in(path.read_bytes()) == [], path
    events = (out / "events.jsonl").read_text(encoding="utf-8")
    assert '"$redacted"' in events.replace('\\"', '"')
    verified = subprocess.run(
        [sys.executable, "-I", str(out / "verify_bundle.py"), str(out), "--allow-unsigned"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_redacting_tool_on_a_journal_without_a_key_service_is_refused_at_start_up(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    journal = KafkaJournal(kafka_bootstrap, topic=make_topic(partitions=1))
    try:
        sagacity = Sagacity(journal)
        with pytest.raises(ConfigurationError, match=KEK_SETTING) as caught:
            sagacity.wrap(Payments())
        assert "redacts $.card_number, $.customer.iban" in caught.value.message
        assert "charge" not in sagacity.registry
    finally:
        journal.close()
