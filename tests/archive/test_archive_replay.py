"""``sagacity replay`` against real Kafka and Postgres: the topic re-read, verified and
diffed with the archive (missing, extra, differing events)."""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from archive_helpers import as_raw, encode, make_chain
from click.testing import CliRunner
from confluent_kafka import Producer

from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.archive._replay import diff_with_archive, read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


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
        report, chains = read_topic(kafka_bootstrap, topic)
        diff_with_archive(conn, report, chains)
    assert report.messages == 8
    assert [u[:2] for u in report.undecodable] == [(0, 7)]
    assert report.sagas["saga-a"].missing == [5]
    assert report.sagas["saga-b"].differing == [2]
    assert report.sagas["saga-ghost"].extra == [1, 2]
    assert all(s.verdict is None or s.verdict.ok for s in report.sagas.values())
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


def test_replay_detects_a_broken_chain_on_the_topic(kafka_bootstrap, make_topic, archive_dsn):
    topic = make_topic(partitions=1)
    a = make_chain("saga-a", 4)
    produce(kafka_bootstrap, topic, [a[0], a[1], a[3]])
    report, _ = read_topic(kafka_bootstrap, topic, saga_id="saga-a")
    verdict = report.sagas["saga-a"].verdict
    assert verdict is not None
    assert (verdict.ok, verdict.bad_seq, verdict.reason) == (False, 3, "gap")


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
