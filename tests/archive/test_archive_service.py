"""The archiver service against real Kafka and real Postgres: end to end, metrics, and a
SIGKILL in the middle of a stream followed by a restart (every event archived exactly once)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import psycopg
import pytest
from archive_helpers import encode, make_chain, rows
from confluent_kafka import Producer

from sagacity import compose
from sagacity.consumers.archive import audit
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.postgres.archive import PostgresArchiveAudits

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the journal's: a key's partition
        }
    )
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(30) == 0


def wait_for(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def count(dsn: str) -> int:
    return int(rows(dsn, "SELECT count(*) FROM side_effect_journal")[0][0])


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_service_archives_quarantines_dedups_and_signs(
    kafka_bootstrap, make_topic, archive_dsn, tmp_path, caplog
):
    from sagacity.consumers.archive import generate_key

    caplog.set_level(logging.INFO, logger="sagacity")

    topic = make_topic(partitions=3)
    chains = [make_chain(f"saga-{i}", 10) for i in range(5)]
    messages = [(e.saga_id.encode(), encode(e)) for c in chains for e in c]
    messages.insert(7, (b"saga-0", b"\x00garbage"))
    messages += [(chains[1][3].saga_id.encode(), encode(chains[1][3]))]  # a redelivery
    produce(kafka_bootstrap, topic, messages)
    key = tmp_path / "k.pem"
    signer = generate_key(key)
    port = free_port()
    service = ArchiveService(
        ArchiveSettings(
            bootstrap_servers=kafka_bootstrap,
            database_url=archive_dsn,
            topic=topic,
            group_id=f"g-{uuid.uuid4().hex[:6]}",
            batch_size=7,
            poll_timeout=0.2,
            signing_key=key,
            checkpoint_interval=0.5,
            metrics_port=port,
            witness=str(tmp_path / "witness" / "latest.json"),
        ),
        dependencies=compose.archive(),
    )
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        wait_for(lambda: count(archive_dsn) == 50, what="50 rows")
        wait_for(lambda: service.metrics.duplicates._value.get() == 1, what="one duplicate")
        wait_for(
            lambda: (
                rows(archive_dsn, "SELECT count(*) FROM archive_checkpoint WHERE seq = 10")
                == [(5,)]
            ),
            what="checkpoints of the heads",
        )
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "sagacity_archive_events_total 50.0" in body
        assert 'sagacity_archive_quarantined_total{reason="undecodable"} 1.0' in body
        (signing_rounds,) = (
            float(line.split()[1])
            for line in body.splitlines()
            if line.startswith("sagacity_archive_signing_rounds_total ")
        )
        assert signing_rounds >= 1
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status == 200
    finally:
        service.stop()
        runner.join(30)
    assert not runner.is_alive()
    q = rows(archive_dsn, "SELECT reason, raw_value FROM archive_quarantine")
    assert q == [("undecodable", b"\x00garbage")]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok, summary.events) == (5, 5, 50)
    assert summary.checkpoints >= 5  # every head at seq 10, maybe earlier heads too
    # Each round is logged as the line to publish, and it is the archive's latest round.
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("signed round")]
    assert logged
    assert logged[-1].split()[2] == "{}:{}".format(*summary.rounds.latest)
    # ... and published to the witness, outside the database.
    from sagacity.consumers.archive._witness import read

    witnessed = read(str(tmp_path / "witness" / "latest.json"))
    assert witnessed is not None
    assert (witnessed.round_id, witnessed.root) == summary.rounds.latest
    stored = rows(archive_dsn, "SELECT sum(next_offset) FROM archive_consumer_offset")
    assert stored == [(len(messages),)]


def _serve(bootstrap: str, dsn: str, topic: str, group: str, log) -> subprocess.Popen[bytes]:
    import os

    # A killed member holds its partitions until its session times out: keep that short.
    env = {**os.environ, "SAGACITY_KAFKA_SESSION_TIMEOUT_MS": "6000"}
    return subprocess.Popen(
        [
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
            group,
            "--batch-size",
            "50",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env,
    )


@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_archives_every_event_exactly_once(
    kafka_bootstrap, make_topic, archive_dsn, tmp_path
):
    log = (tmp_path / "archiver.log").open("wb")
    topic = make_topic(partitions=3)
    group = f"g-{uuid.uuid4().hex[:6]}"
    chains = [make_chain(f"saga-{i:03d}", 12) for i in range(250)]
    # Interleave sagas the way concurrent agents would.
    events = [c[seq] for seq in range(12) for c in chains]
    half = len(events) // 2
    produce(kafka_bootstrap, topic, [(e.saga_id.encode(), encode(e)) for e in events[:half]])
    proc = _serve(kafka_bootstrap, archive_dsn, topic, group, log)
    try:
        wait_for(lambda: count(archive_dsn) >= 300, what="the first rows")
        # Keep producing while the archiver works (in paced chunks, so that the stream is still
        # arriving), then kill it without warning once it archived part of the second half.
        rest = [(e.saga_id.encode(), encode(e)) for e in events[half:]]

        def feed() -> None:
            for i in range(0, len(rest), 100):
                produce(kafka_bootstrap, topic, rest[i : i + 100])
                time.sleep(0.05)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_for(lambda: count(archive_dsn) >= half + 200, what="part of the second half")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        feeder.join(60)
        killed_at = count(archive_dsn)
        assert 300 <= killed_at < len(events)
        proc = _serve(kafka_bootstrap, archive_dsn, topic, group, log)
        wait_for(lambda: count(archive_dsn) == len(events), timeout=90, what="every event")
        time.sleep(1.0)  # nothing more arrives after the last event
        assert count(archive_dsn) == len(events)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    log.close()
    assert proc.returncode == 0, (tmp_path / "archiver.log").read_text()
    assert rows(archive_dsn, "SELECT count(DISTINCT (saga_id, seq)) FROM side_effect_journal") == [
        (len(events),)
    ]
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine") == [(0,)]
    assert rows(archive_dsn, "SELECT sum(next_offset) FROM archive_consumer_offset") == [
        (len(events),)
    ]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn))
    assert (summary.sagas, summary.ok, summary.events) == (250, 250, len(events))
