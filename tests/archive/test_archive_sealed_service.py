"""``sagacity serve archive`` opening sealed events through the key service, as its own process
on real Kafka and PostgreSQL (docs/adr/0019-erasure.md §3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import EntryDraft, EventType, JournalEntry
from sagacity.chain import committing, link
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.postgres import PostgresKeyStore
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal
from sagacity.schemas import JOURNAL_WIRE, decode_record
from sagacity.schemas._sealed import encode_sealed

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
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
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
    # The archive opened the saga: its bundle holds the values, no note.
    exported = _export(archive_dsn, "sealed-arch", tmp_path / "bundle")
    assert "sealed data" not in exported
    lines = (tmp_path / "bundle" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["payload"] for line in lines] == [None, MARKER]


def _export(dsn: str, saga_id: str, out: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sagacity.cli import main; main()",
            "export",
            "--database-url",
            dsn,
            "--saga",
            saga_id,
            "--out",
            str(out),
            "--allow-unopened",  # this archive ingests without the key-encryption key
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_an_export_of_a_saga_archived_sealed_says_its_data_is_sealed(
    archive_dsn: str, tmp_path: Path
) -> None:
    """Archived without the keys, a sealed saga's bundle carries its commitments; the export
    says so and the bundle still verifies."""
    keys = KeyService(
        PostgresKeyStore(archive_dsn),
        KeyRing((write_key_encryption_key(tmp_path / "journal.kek"),)),
    )
    chain: list[JournalEntry] = []
    prev = "0" * 64
    try:
        for draft in (
            EntryDraft(saga_id="sealed-exp", event_type=EventType.SAGA_OPENED),
            EntryDraft(
                saga_id="sealed-exp", event_type=EventType.INTENT, tool="mail", payload=MARKER
            ),
        ):
            entry = link(committing(draft), seq=len(chain) + 1, prev_hash=prev)
            chain.append(entry)
            prev = entry.hash
        raw = [
            RawEvent(
                topic="t", partition=0, offset=i, key=b"sealed-exp", value=encode_sealed(e, keys)
            )
            for i, e in enumerate(chain)
        ]
    finally:
        keys.close()
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        assert archiver.archive(raw).archived == 2
    finally:
        archiver.close()
    out = tmp_path / "bundle"
    shown = _export(archive_dsn, "sealed-exp", out)
    assert "note: 1 event(s) hold sealed data the archive did not open" in shown
    assert "marker-archive" not in (out / "events.jsonl").read_text(encoding="utf-8")
    verified = subprocess.run(
        [sys.executable, "-I", str(out / "verify_bundle.py"), str(out), "--allow-unsigned"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Commitments only, no ERASED: withheld, unless the auditor accepts a bundle of an archive
    # that stores sealed events' commitments only.
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert verified.stdout.startswith("FAILED: withheld at seq 2: ")
    verified = subprocess.run(
        [
            sys.executable,
            "-I",
            str(out / "verify_bundle.py"),
            str(out),
            "--allow-unsigned",
            "--allow-unopened",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "accepted only because of --allow-unopened" in verified.stdout


def test_the_archive_service_refuses_a_missing_key_file_and_starts_with_anothers_keys(
    kafka_bootstrap: str, make_topic: Callable[..., str], archive_dsn: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    # A data key exists under one key; a missing file or another key cannot open it.
    journal_kek = write_key_encryption_key(tmp_path / "journal.kek")
    keys = KeyService(PostgresKeyStore(archive_dsn), KeyRing((journal_kek,)))
    try:
        keys.seal("sealed-first", 1, "payload", b"x" * 20)
    finally:
        keys.close()
    # Its own key file missing is the process's configuration: refused, naming the setting.
    env = {**os.environ, "SAGACITY_DATABASE_URL": archive_dsn}
    missing = {**env, KEK_SETTING: str(tmp_path / "missing.kek")}
    done = subprocess.run(
        _command(kafka_bootstrap, archive_dsn, topic),
        cwd=ROOT,
        env=missing,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert KEK_SETTING in errors[0], done.stderr
    # Keys under a KEK it does not hold are other sagas' data: it starts and says so.
    write_key_encryption_key(tmp_path / "other.kek")
    log = tmp_path / "other.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(kafka_bootstrap, archive_dsn, topic),
            cwd=ROOT,
            env={**env, KEK_SETTING: str(tmp_path / "other.kek")},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while journal_kek.key_id not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        warning = [line for line in log.read_text().splitlines() if journal_kek.key_id in line]
        assert KEK_SETTING in warning[0]
        assert process.poll() is None  # still running
    finally:
        process.terminate()
        process.wait(30)
