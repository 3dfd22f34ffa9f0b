"""``sagacity serve archive`` opening sealed events through the key service, as its own process
on real Kafka and PostgreSQL (docs/adr/0019-erasure.md §3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import EntryDraft, EventType
from sagacity._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity._keys import KeyService
from sagacity.keystore_postgres import PostgresKeyStore
from sagacity.producer import KafkaJournal
from sagacity.schemas._codec import decode_record

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

MARKER = '{"email":"marker-archive-5e1c@example.org"}'
ROOT = Path(__file__).resolve().parents[2]


def _command(bootstrap: str, dsn: str, topic: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from sagacity.cli import main; main()",
        "serve",
        "archive",
        "--bootstrap-servers",
        bootstrap,
        "--database-url",
        dsn,
        "--topic",
        topic,
        "--group",
        f"archive-{topic}",
        "--batch-size",
        "50",
    ]


def _rows(dsn: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(query).fetchall())


def test_the_archive_service_opens_sealed_events_and_quarantines_altered_ones(
    kafka_bootstrap: str, make_topic: Callable[..., str], archive_dsn: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    kek_file = tmp_path / "journal.kek"
    keys = KeyService(PostgresKeyStore(archive_dsn), KeyRing((write_key_encryption_key(kek_file),)))
    journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
    try:
        journal.append(EntryDraft(saga_id="sealed-arch", event_type=EventType.SAGA_OPENED))
        intent = journal.append(
            EntryDraft(
                saga_id="sealed-arch", event_type=EventType.INTENT, tool="mail", payload=MARKER
            )
        )
        journal.flush()
    finally:
        journal.close()
        keys.close()
    assert intent.form == 2
    # The same INTENT with one byte of its sealed payload flipped, at the next offset.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"raw-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 1)])
    message = consumer.poll(15)
    consumer.close()
    assert message is not None
    value = message.value() or b""
    assert MARKER.encode() not in value
    box = decode_record(value)["sealed"]["payload"]
    altered = bytearray(value)
    altered[value.index(box) + len(box) // 2] ^= 1
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"sealed-arch", value=bytes(altered))
    producer.flush(10)

    env = {**os.environ, KEK_SETTING: str(kek_file), "SAGACITY_DATABASE_URL": archive_dsn}
    log = (tmp_path / "archive.log").open("ab")
    process = subprocess.Popen(
        _command(kafka_bootstrap, archive_dsn, topic),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            archived = _rows(
                archive_dsn,
                "SELECT seq, payload FROM side_effect_journal WHERE saga_id = 'sealed-arch' "
                "ORDER BY seq",
            )
            quarantined = _rows(archive_dsn, "SELECT reason FROM archive_quarantine")
            if len(archived) == 2 and quarantined:
                break
            assert process.poll() is None, (tmp_path / "archive.log").read_text()
            assert time.monotonic() < deadline, (archived, quarantined)
            time.sleep(0.3)
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    assert archived == [(1, None), (2, MARKER)]
    assert quarantined == [("authentication failed",)]

    # Replay opens the topic's sealed events with the key (the altered copy does not
    # authenticate); without it the chain verifies by its commitments and says so.
    replay = [
        sys.executable,
        "-c",
        "from sagacity.cli import main; main()",
        "replay",
        "--database-url",
        archive_dsn,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
    ]
    opened = subprocess.run(
        replay, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert opened.returncode == 1, opened.stdout + opened.stderr
    assert "authentication failed" in opened.stdout
    assert "sealed data not opened" not in opened.stdout
    bare = {k: v for k, v in env.items() if k != KEK_SETTING}
    sealed = subprocess.run(
        replay, cwd=ROOT, env=bare, capture_output=True, text=True, timeout=120, check=False
    )
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    assert f"sealed data not opened ({KEK_SETTING} is not set)" in sealed.stdout
    assert MARKER not in sealed.stdout


def test_the_archive_service_refuses_to_start_with_a_missing_or_wrong_key_file(
    kafka_bootstrap: str, make_topic: Callable[..., str], archive_dsn: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    # A data key exists under one key; a missing file or another key cannot open it.
    keys = KeyService(
        PostgresKeyStore(archive_dsn),
        KeyRing((write_key_encryption_key(tmp_path / "journal.kek"),)),
    )
    try:
        keys.seal("sealed-first", 1, "payload", b"x" * 20)
    finally:
        keys.close()
    write_key_encryption_key(tmp_path / "other.kek")
    for key_file in (tmp_path / "missing.kek", tmp_path / "other.kek"):
        env = {**os.environ, KEK_SETTING: str(key_file), "SAGACITY_DATABASE_URL": archive_dsn}
        done = subprocess.run(
            _command(kafka_bootstrap, archive_dsn, topic),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0, (key_file, done.stderr)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, done.stderr
        assert KEK_SETTING in errors[0], done.stderr
