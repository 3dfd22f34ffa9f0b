"""``sagacity replay`` against real Kafka and Postgres: the topic re-read, verified and
diffed with the archive (missing, extra, differing events)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import psycopg
import pytest
from archive_helpers import as_raw, encode, make_chain
from click.testing import CliRunner
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver
from sagacity.consumers.archive._replay import diff_with_archive, read_topic
from sagacity.postgres.archive import PostgresArchiveIngest, PostgresArchiveReads
from sagacity.producer import KAFKA_PARTITIONER, ForkKind, KafkaTopicPasses
from sagacity.schemas import JOURNAL_WIRE, decode_entry

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    """One archiver: replay reads the topic; the ingest paths are compared elsewhere."""
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()


def produce(bootstrap, topic, entries, extra=()):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for e in entries:
        producer.produce(topic, key=e.saga_id.encode(), value=encode(e))
    for key, value in extra:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def test_replay_matches_an_archive_made_from_the_same_topic(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=2)
    a, b = make_chain("saga-a", 5), make_chain("saga-b", 3)
    produce(kafka_bootstrap, topic, a + b)
    archiver.archive(as_raw(a + b, topic=topic))
    result = CliRunner().invoke(
        main,
        [
            "replay",
            "--database-url",
            archive_dsn,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "sagas matching" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("sagas matching"))
    assert line.split()[-1] == "2"


def test_replay_reports_missing_extra_and_differing(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 5)
    b = make_chain("saga-b", 2)
    produce(kafka_bootstrap, topic, a + b, extra=[(b"x", b"\x01junk")])
    # The archive lacks saga-a's seq 5, and holds a saga the topic never had.
    archiver.archive(as_raw(a[:4] + b + make_chain("saga-ghost", 2), topic=topic))
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        forged = link(dataclasses.replace(b[1], result="forged"), seq=2, prev_hash=b[0].hash)
        conn.execute(
            "UPDATE side_effect_journal SET result = %s, hash = %s WHERE saga_id = 'saga-b'"
            " AND seq = 2",
            (forged.result, forged.hash),
        )
        conn.commit()
        report, chains = read_topic(
            kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
        )
        diff_with_archive(PostgresArchiveReads(conn), report, chains)
    assert report.messages == 8
    assert [u[:2] for u in report.undecodable] == [(0, 7)]
    assert report.sagas["saga-a"].missing == [5]
    assert report.sagas["saga-b"].differing == [2]
    assert report.sagas["saga-ghost"].extra == [1, 2]
    assert not any(s.rejected for s in report.sagas.values())
    result = CliRunner().invoke(
        main,
        [
            "replay",
            "--database-url",
            archive_dsn,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
        ],
    )
    assert result.exit_code == 1
    assert "missing: 5" in result.stdout
    assert "differing: 2" in result.stdout
    assert "extra: 1, 2" in result.stdout
    assert "undecodable message at partition 0 offset 7" in result.stdout
    as_json = CliRunner().invoke(
        main,
        [
            "replay",
            "--database-url",
            archive_dsn,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--json",
        ],
    )
    assert as_json.exit_code == 1
    found = {s["saga_id"]: s for s in json.loads(as_json.stdout)["differing"]}
    assert found["saga-a"]["missing"] == [5]
    assert found["saga-b"]["differing"] == [2]
    assert found["saga-ghost"]["extra"] == [1, 2]


def test_replay_reports_an_event_past_a_gap_on_the_topic(kafka_bootstrap, make_topic, archive_dsn):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 4)
    produce(kafka_bootstrap, topic, [a[0], a[1], a[3]])
    report, chains = read_topic(
        kafka_bootstrap, topic, saga_id="saga-a", passes=KafkaTopicPasses(), decode=decode_entry
    )
    saga = report.sagas["saga-a"]
    assert [e.seq for e in chains["saga-a"]] == [1, 2]
    (rejected,) = saga.rejected
    assert (rejected.kind, rejected.entry.seq, rejected.offset) == (ForkKind.FORK, 4, 2)
    assert rejected.detail == "seq 4 does not extend the tail at seq 2"


def replay_cli(archive_dsn, kafka_bootstrap, topic, *extra):
    return CliRunner().invoke(
        main,
        [
            "replay",
            "--database-url",
            archive_dsn,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            *extra,
        ],
    )


def _count(out: str, label: str) -> int:
    line = next(x for x in out.splitlines() if x.startswith(label))
    return int(line.split()[-1].replace(",", ""))


def test_a_writer_conflict_fork_is_reported_as_a_fork_not_a_difference(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 5)
    # A second writer raced for seq 3 and lost: its event is on the topic after the winner's.
    loser = link(dataclasses.replace(a[2], actor="writer-2"), seq=3, prev_hash=a[1].hash)
    on_topic = [a[0], a[1], a[2], loser, a[3], a[4]]
    produce(kafka_bootstrap, topic, on_topic)
    batch = archiver.archive(as_raw(on_topic, topic=topic))
    assert batch.quarantined_total == 1  # the archive refused the loser, as every reader does
    report, chains = read_topic(
        kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
    )
    with psycopg.connect(archive_dsn) as conn:
        diff_with_archive(PostgresArchiveReads(conn), report, chains)
    saga = report.sagas["saga-a"]
    assert (saga.missing, saga.extra, saga.differing) == ([], [], [])
    assert saga.ok
    assert report.ok
    (fork,) = saga.of_kind(ForkKind.FORK)
    assert (fork.entry.seq, fork.offset, fork.entry.hash) == (3, 3, loser.hash)
    assert "seq 3 is already taken by offset 2" in fork.detail
    result = replay_cli(archive_dsn, kafka_bootstrap, topic)
    assert result.exit_code == 0, result.output
    assert "fork: saga saga-a seq 3 at partition 0 offset 3" in result.stdout
    assert _count(result.stdout, "forked events") == 1
    assert _count(result.stdout, "sagas differing") == 0


def test_an_archive_holding_the_losing_fork_differs(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 3)
    loser = link(dataclasses.replace(a[2], actor="writer-2"), seq=3, prev_hash=a[1].hash)
    produce(kafka_bootstrap, topic, [*a, loser])
    archiver.archive(as_raw([a[0], a[1], loser], topic=topic))  # not what a reader accepts
    report, chains = read_topic(
        kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
    )
    with psycopg.connect(archive_dsn) as conn:
        diff_with_archive(PostgresArchiveReads(conn), report, chains)
    saga = report.sagas["saga-a"]
    assert saga.differing == [3]
    assert [r.entry.hash for r in saga.of_kind(ForkKind.FORK)] == [loser.hash]
    assert not report.ok


def test_a_foreign_event_is_reported_under_its_key_and_not_compared(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=1)
    a, c = make_chain("saga-a", 3), make_chain("saga-c", 1)
    produce(kafka_bootstrap, topic, a, extra=[(b"saga-a", encode(c[0])), (None, encode(c[0]))])
    archiver.archive(as_raw(a, topic=topic))
    report, chains = read_topic(
        kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
    )
    with psycopg.connect(archive_dsn) as conn:
        diff_with_archive(PostgresArchiveReads(conn), report, chains)
    assert set(report.sagas) == {"saga-a"}  # grouped by key: no saga-c was ever on the topic
    (foreign,) = report.sagas["saga-a"].of_kind(ForkKind.FOREIGN)
    assert (foreign.entry.saga_id, foreign.offset) == ("saga-c", 3)
    assert report.unkeyed == [(0, 4, "saga-c")]  # no reader selects an event without a key
    assert report.ok
    result = replay_cli(archive_dsn, kafka_bootstrap, topic)
    assert result.exit_code == 0, result.output
    assert "its body names 'saga-c'" in result.stdout
    assert "event without a text key at partition 0 offset 4" in result.stdout
    assert _count(result.stdout, "foreign events") == 2
    result = replay_cli(archive_dsn, kafka_bootstrap, topic, "--saga", "saga-a")
    assert result.exit_code == 0, result.output
    assert _count(result.stdout, "foreign events") == 1


def test_replay_compares_only_its_own_topics_rows(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    first, second = make_topic(partitions=1), make_topic(partitions=1)
    a, b = make_chain("saga-a", 3), make_chain("saga-b", 2)
    produce(kafka_bootstrap, first, a)
    produce(kafka_bootstrap, second, b)
    archiver.archive(as_raw(a, topic=first) + as_raw(b, topic=second))
    for topic, expected in ((first, {"saga-a"}), (second, {"saga-b"})):
        report, chains = read_topic(
            kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
        )
        with psycopg.connect(archive_dsn) as conn:
            diff_with_archive(PostgresArchiveReads(conn), report, chains)
        assert set(report.sagas) == expected
        assert report.ok, report.sagas
    result = replay_cli(archive_dsn, kafka_bootstrap, first)
    assert result.exit_code == 0, result.output
    assert _count(result.stdout, "sagas matching") == 1


def test_replay_of_a_missing_topic_is_a_clear_error(kafka_bootstrap, archive_dsn):
    result = CliRunner().invoke(
        main,
        [
            "replay",
            "--database-url",
            archive_dsn,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            "no.such.topic.here",
            "--timeout",
            "5",
        ],
    )
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_a_trimmed_topic_is_replayed_from_the_first_event_it_keeps(
    kafka_bootstrap, make_topic, archiver, archive_dsn
):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 5)
    loser = link(dataclasses.replace(a[3], actor="writer-2"), seq=4, prev_hash=a[2].hash)
    produce(kafka_bootstrap, topic, [*a[:4], loser, a[4]])
    archiver.archive(as_raw([*a[:4], loser, a[4]], topic=topic))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, 2)]).values()
    future.result(timeout=30)  # as Kafka retention would: seqs 1 and 2 are gone from the topic
    report, chains = read_topic(
        kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry
    )
    with psycopg.connect(archive_dsn) as conn:
        diff_with_archive(PostgresArchiveReads(conn), report, chains)
    assert report.trimmed
    saga = report.sagas["saga-a"]
    assert saga.topic_starts_at == 3
    assert [e.seq for e in chains["saga-a"]] == [3, 4, 5]
    assert (saga.missing, saga.extra, saga.differing) == ([], [], [])
    assert [r.entry.hash for r in saga.of_kind(ForkKind.FORK)] == [loser.hash]
    assert report.ok


def test_replay_reads_a_transactional_topic_to_its_end(kafka_bootstrap, make_topic):
    """A transaction's commit marker takes the partition's last offset and is never
    delivered: the replay ends once the consumer's position passes it, not when the idle
    timeout runs out."""
    topic = make_topic(partitions=1)
    a = make_chain("saga-tx", 3)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"replay-{topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for e in a:
        producer.produce(topic, key=e.saga_id.encode(), value=encode(e))
    producer.commit_transaction(30)
    report, chains = read_topic(
        kafka_bootstrap, topic, passes=KafkaTopicPasses(), decode=decode_entry, timeout=3
    )
    assert report.messages == 3
    assert [e.seq for e in chains["saga-tx"]] == [1, 2, 3]
