"""Sealed journal (docs/adr/0019-erasure.md): with a key service, a saga's data never travels
in clear on the topic, the saga still runs, compensates and verifies, and readers open it."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus, compensable, compensation, verify
from sagacity._env import journal_from_env, key_service_from_env
from sagacity.errors import ConfigurationError, KeyEncryptionKeyError
from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KafkaJournal, partition_for
from sagacity.schemas import decode_entry
from sagacity.testing import InMemoryKeyStore

pytestmark = pytest.mark.kafka
E = EventType
MARKER = "MARKER-9d41b7"


class Mailer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @compensable(by="recall")
    def send(self, to: str, body: str) -> str:
        self.calls.append(f"send:{to}")
        return f"sent to {to}: {body}"

    @compensation
    def recall(self, context: Any) -> None:
        self.calls.append(f"recall:{context.result}")


def _raw(bootstrap: str, topic: str, partition: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 20
        while len(out) < high and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        return out
    finally:
        consumer.close()


def test_a_sealed_saga_runs_compensates_and_verifies_with_no_clear_data_on_the_topic(
    kafka_bootstrap: str, topic: str, journal_factory: Callable[..., KafkaJournal]
) -> None:
    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    journal = journal_factory(topic, keys=keys)
    sagacity = Sagacity(journal=journal)
    mailer = Mailer()
    tools = sagacity.wrap(mailer)
    saga = f"mail-{uuid.uuid4().hex}"

    def work() -> None:
        tools.send("ada@example.org", MARKER)
        raise RuntimeError("the campaign was cancelled")

    result = sagacity.saga(saga, work)
    assert result.status is SagaStatus.COMPENSATED
    assert mailer.calls == [
        "send:ada@example.org",
        f"recall:sent to ada@example.org: {MARKER}",
    ]
    messages = [
        m
        for m in _raw(kafka_bootstrap, topic, partition_for(saga.encode(), 6))
        if m.key() == saga.encode()
    ]
    assert len(messages) >= 5
    assert not any(MARKER.encode() in m.value() for m in messages)
    assert not any(b"ada@example.org" in m.value() for m in messages)
    # Read back through the key service: opened, form 2, verified.
    read = journal_factory(topic, keys=keys).reader.read(saga)
    assert verify(read.entries).ok
    assert all(e.form == 2 for e in read.entries)
    intent = next(e for e in read.entries if e.event_type is E.INTENT)
    assert MARKER in (intent.payload or "")
    assert E.COMPENSATED in [e.event_type for e in read.entries]
    assert not read.rejected
    assert not read.skipped
    # Without the key: the commitments alone, which verify; after erasure likewise.
    blind = [decode_entry(m.value()) for m in messages]
    assert all(e.payload is None and e.result is None for e in blind)
    assert verify(blind).ok
    keys.destroy(saga, actor="dpo@example.org", reason="erasure request 12")
    assert verify(journal_factory(topic, keys=keys).reader.read(saga).entries).ok


def test_a_sealed_saga_gets_its_data_key_as_it_opens(
    topic: str, journal_factory: Callable[..., KafkaJournal]
) -> None:
    store = InMemoryKeyStore()
    journal = journal_factory(
        topic, keys=KeyService(store, KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    )
    saga = f"open-{uuid.uuid4().hex}"
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    # Made with the opening, not on the first tool call (which would pay the store's round trips).
    row = store.load(saga)
    assert row is not None
    assert not row.erased


def test_a_plain_journal_still_writes_form_1(
    topic: str, journal_factory: Callable[..., KafkaJournal]
) -> None:
    journal = journal_factory(topic)
    sagacity = Sagacity(journal=journal)
    tools = sagacity.wrap(Mailer())
    saga = f"mail-{uuid.uuid4().hex}"
    sagacity.saga(saga, lambda: tools.send("b@example.org", "hi"))
    read = journal_factory(topic).reader.read(saga)
    assert verify(read.entries).ok
    assert all(e.form == 1 for e in read.entries)


def test_a_key_service_with_the_archive_index_is_refused(kafka_bootstrap: str, topic: str) -> None:
    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    with pytest.raises(ConfigurationError, match="leave the index out"):
        KafkaJournal(kafka_bootstrap, topic=topic, keys=keys, index=object())  # type: ignore[arg-type]


@pytest.mark.postgres
def test_journal_from_env_seals_with_the_key_file_and_says_so_without_it(
    kafka_bootstrap: str,
    topic: str,
    pg_dsn: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SAGACITY_KEY_ENCRYPTION_KEY_FILE set: the journal seals (keys stored in Postgres);
    unset: refused, unless SAGACITY_ALLOW_CLEAR_DATA says so, and then one line, once per
    process, says the data travels in clear once the journal has started; a wrong file is
    refused, naming the setting."""
    import sagacity._env
    from sagacity.errors import ConfigurationError

    monkeypatch.setattr(sagacity._env, "_announced", False)
    env = {"SAGACITY_BOOTSTRAP_SERVERS": kafka_bootstrap, "SAGACITY_TOPIC": topic}
    with pytest.raises(ConfigurationError, match="SAGACITY_ALLOW_CLEAR_DATA=1"):
        journal_from_env(env)
    env["SAGACITY_ALLOW_CLEAR_DATA"] = "1"
    with caplog.at_level(logging.WARNING, logger="sagacity.journal"):
        plain = journal_from_env(env)
        again = journal_from_env(env)
    try:
        lines = [r.getMessage() for r in caplog.records if r.name == "sagacity.journal"]
        assert len(lines) == 1
        assert "not encrypted: SAGACITY_KEY_ENCRYPTION_KEY_FILE is not set" in lines[0]
    finally:
        plain.close()
        again.close()
    kek = tmp_path / "journal.kek"
    write_key_encryption_key(kek)
    sealed_env = {
        **env,
        "SAGACITY_KEY_ENCRYPTION_KEY_FILE": str(kek),
        "SAGACITY_DATABASE_URL": pg_dsn,
    }
    journal = journal_from_env(sealed_env)
    try:
        sagacity = Sagacity(journal=journal)
        tools = sagacity.wrap(Mailer())
        saga = f"mail-{uuid.uuid4().hex}"
        sagacity.saga(saga, lambda: tools.send("c@example.org", MARKER))
        raw = [
            m
            for m in _raw(kafka_bootstrap, topic, partition_for(saga.encode(), 6))
            if m.key() == saga.encode()
        ]
        assert raw
        assert not any(MARKER.encode() in m.value() for m in raw)
        read = journal.reader.read(saga)
        assert verify(read.entries).ok
        assert MARKER in (read.entries[1].payload or "")
    finally:
        journal.close()
    with pytest.raises(KeyEncryptionKeyError, match="SAGACITY_KEY_ENCRYPTION_KEY_FILE"):
        key_service_from_env(
            {**sealed_env, "SAGACITY_KEY_ENCRYPTION_KEY_FILE": str(tmp_path / "none")}
        )
    with pytest.raises(ConfigurationError, match="SAGACITY_DATABASE_URL"):
        key_service_from_env({"SAGACITY_KEY_ENCRYPTION_KEY_FILE": str(kek)})
