"""Two archive instances in one consumer group on a 12-partition topic, real Kafka and real
PostgreSQL: one joins while the other works, then the first leaves mid-stream; every event is
archived exactly once, none quarantined, and the archive verifies."""

from __future__ import annotations

import threading
import time
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


def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",  # the journal's: a key's partition
        }
    )
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(30) == 0


def _wait_for(predicate, what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _count(dsn: str) -> int:
    return int(rows(dsn, "SELECT count(*) FROM side_effect_journal")[0][0])


def test_two_instances_archive_everything_once_across_rebalances(
    kafka_bootstrap, make_topic, archive_dsn
):
    topic = make_topic(partitions=12)
    group = f"g-{uuid.uuid4().hex[:6]}"
    chains = [make_chain(f"saga-{i:03d}", 8) for i in range(120)]
    events = [c[seq] for seq in range(8) for c in chains]  # interleaved, as agents write
    messages = [(e.saga_id.encode(), encode(e)) for e in events]
    third = len(messages) // 3

    def instance() -> tuple[ArchiveService, threading.Thread]:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=kafka_bootstrap,
                database_url=archive_dsn,
                topic=topic,
                group_id=group,
                batch_size=40,
                poll_timeout=0.1,
                # A member that leaves says so; one that joins waits for the others' next poll.
                kafka_config={"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
            ),
            dependencies=compose.archive(),
        )
        thread = threading.Thread(target=service.run)
        thread.start()
        return service, thread

    def feed(chunk: list[tuple[bytes, bytes]]) -> None:
        for i in range(0, len(chunk), 40):
            _produce(kafka_bootstrap, topic, chunk[i : i + 40])
            time.sleep(0.02)

    _produce(kafka_bootstrap, topic, messages[:third])
    first, first_thread = instance()
    second: ArchiveService | None = None
    second_thread: threading.Thread | None = None
    try:
        _wait_for(lambda: _count(archive_dsn) >= 100, "the first instance's first rows")
        # The second instance joins while the stream still arrives: the partitions rebalance.
        feeder = threading.Thread(target=feed, args=(messages[third : 2 * third],))
        feeder.start()
        second, second_thread = instance()
        feeder.join(60)
        _wait_for(
            lambda: second is not None and second.metrics.archived._value.get() > 0,
            "the second instance to archive",
        )
        # The first leaves mid-stream: its partitions go back to the second.
        feeder = threading.Thread(target=feed, args=(messages[2 * third :],))
        feeder.start()
        first.stop()
        first_thread.join(30)
        assert not first_thread.is_alive()
        feeder.join(60)
        _wait_for(lambda: _count(archive_dsn) == len(events), "every event")
        time.sleep(0.5)  # nothing more arrives after the last event
    finally:
        first.stop()
        if second is not None:
            second.stop()
        for thread in (first_thread, second_thread):
            if thread is not None:
                thread.join(30)
    archived_by = (first.metrics.archived._value.get(), second.metrics.archived._value.get())
    assert all(n > 0 for n in archived_by), archived_by
    assert sum(archived_by) == len(events)  # each event archived by one instance, once
    assert rows(archive_dsn, "SELECT count(DISTINCT (saga_id, seq)) FROM side_effect_journal") == [
        (len(events),)
    ]
    assert _count(archive_dsn) == len(events)
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine") == [(0,)]
    assert rows(archive_dsn, "SELECT count(*), sum(next_offset) FROM archive_consumer_offset") == [
        (12, len(events))
    ]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn))
    assert (summary.sagas, summary.ok, summary.events) == (120, 120, len(events))
