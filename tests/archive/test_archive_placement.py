"""Where and when an event may be archived, on real Kafka and PostgreSQL: a message not on its
key's partition is foreign (``wrong_partition``), and an event dated outside the archive's time
window is quarantined (``time_out_of_range``) without making a partition for its month."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from archive_helpers import encode, make_chain, rows
from click.testing import CliRunner
from confluent_kafka import Producer

from sagacity import EntryDraft, EventType, Reversibility, Sagacity, compensable, compose
from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.entries import _attributes as attr
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal, partition_for
from sagacity.schemas import JOURNAL_WIRE
from sagacity.signing._decision_signature import generate_key

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
ALICE = '{"amount":"100","to":"alice"}'


class Bank:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        return "ok"


def _wait(check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _archived(dsn: str, saga_id: str) -> list[str]:
    found = rows(
        dsn,
        "SELECT event_type FROM side_effect_journal WHERE saga_id = %s ORDER BY seq",
        (saga_id,),
    )
    return [str(r[0]) for r in found]


def _quarantined(dsn: str, saga_id: str) -> list[tuple[str, int]]:
    found = rows(
        dsn,
        "SELECT reason, seq FROM archive_quarantine WHERE saga_id = %s ORDER BY id",
        (saga_id,),
    )
    return [(str(r[0]), int(r[1])) for r in found]


@pytest.fixture
def archive_of(kafka_bootstrap: str, archive_dsn: str) -> Iterator[Callable[..., ArchiveService]]:
    running: list[tuple[ArchiveService, threading.Thread]] = []

    def start(topic: str, **settings: Any) -> ArchiveService:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=kafka_bootstrap,
                database_url=archive_dsn,
                topic=topic,
                group_id=f"g-{uuid.uuid4().hex[:6]}",
                batch_size=50,
                poll_timeout=0.2,
                **settings,
            ),
            dependencies=compose.archive(),
        )
        runner = threading.Thread(target=service.run)
        runner.start()
        running.append((service, runner))
        return service

    yield start
    for service, runner in running:
        service.stop()
        runner.join(30)


def test_a_decision_on_another_partition_is_foreign_to_the_archive(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    """A forged REJECTED, linked to the pending request's saga and produced with its key but on
    the other partition, reaches the archive before the real approval: no reader of the saga
    sees it, and the archive does not either — it is quarantined ``wrong_partition``, the real
    approval and execution are archived, and ``verify --saga`` shows the quarantined message."""
    topic = make_topic(partitions=2)
    key = generate_key(tmp_path / "approvals.pem")
    agent_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    desk_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        agent = Sagacity(
            agent_journal, compensation="delegated", approvals_public_key=key.public_hex
        )
        desk = Sagacity(desk_journal, compensation="delegated", decision_signer=key)
        bank = agent.wrap(Bank())
        desk.wrap(Bank())
        result = agent.saga("gated", lambda: bank.send_wire_transfer("100", "alice"))
        assert result.awaiting_seq is not None
        chain = agent_journal.entries("gated")
        request, tail = chain[result.awaiting_seq - 1], chain[-1]
        forged = link(
            EntryDraft(
                saga_id="gated",
                event_type=EventType.REJECTED,
                tool=request.tool,
                actor="mallory@example.com",
                attributes={attr.REF_SEQ: str(request.seq)},
            ),
            seq=tail.seq + 1,
            prev_hash=tail.hash,
        )
        archive_of(topic, approvals_public_key=key.public_hex)
        _wait(lambda: len(_archived(archive_dsn, "gated")) == tail.seq, "the request archived")
        elsewhere = 1 - partition_for(b"gated", 2)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(topic, key=b"gated", value=encode(forged), partition=elsewhere)
        assert producer.flush(30) == 0
        _wait(
            lambda: (
                _quarantined(archive_dsn, "gated") or "REJECTED" in _archived(archive_dsn, "gated")
            ),
            "the forged decision taken in",
        )
        # The live readers never saw it: the request is approved and the wire runs.
        desk.approve("gated", request.seq, "alice@example.com")
        assert agent.resume_saga("gated", request.seq, ALICE).status.value == "COMPLETED"
        expected = [e.event_type.value for e in agent_journal.entries("gated")]
    finally:
        agent_journal.close()
        desk_journal.close()
    _wait(lambda: len(_archived(archive_dsn, "gated")) >= len(expected), "the saga archived")
    assert _archived(archive_dsn, "gated") == expected
    assert "APPROVED" in expected
    assert "REJECTED" not in expected
    assert _quarantined(archive_dsn, "gated") == [("wrong_partition", forged.seq)]
    result = CliRunner().invoke(main, ["verify", "--database-url", archive_dsn, "--saga", "gated"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split() for line in lines if line.strip().startswith("wrong_partition")] == [
        ["wrong_partition", "1"]
    ]
    assert [line.split() for line in lines if line.startswith("quarantined")] == [
        ["quarantined", "1"]
    ]


def _partitions(dsn: str) -> int:
    found = rows(
        dsn,
        "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
        " JOIN pg_namespace n ON n.oid = p.relnamespace"
        " WHERE p.relname = 'side_effect_journal' AND n.nspname = current_schema()",
    )
    return int(found[0][0])


def test_events_dated_in_far_months_are_quarantined_and_make_no_partitions(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
) -> None:
    """Sixty sagas each dated in its own month, decades ahead (and one a decade back), are
    quarantined ``time_out_of_range``; no partition is made for them; a legitimate saga after
    them is archived."""
    topic = make_topic(partitions=2)
    year_us = 365 * 86_400_000_000
    now_us = int(time.time() * 1_000_000)
    hostile = [
        make_chain(f"future-{i}", 1, start_us=now_us + 20 * year_us + i * 31 * 86_400_000_000)
        for i in range(60)
    ]
    hostile.append(make_chain("past", 1, start_us=now_us - 10 * year_us))
    legit = make_chain("legit", 3, start_us=now_us - 5_000_000)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for entry in [c[0] for c in hostile] + legit:
        producer.produce(topic, key=entry.saga_id.encode(), value=encode(entry))
    assert producer.flush(30) == 0
    archive_of(topic)
    _wait(lambda: len(_archived(archive_dsn, "legit")) == 3, "the legitimate saga archived")
    stored = "SELECT sum(next_offset) FROM archive_consumer_offset"
    _wait(lambda: rows(archive_dsn, stored) == [(64,)], "every message handled")
    reasons = rows(archive_dsn, "SELECT reason, count(*) FROM archive_quarantine GROUP BY reason")
    assert reasons == [("time_out_of_range", 61)]
    assert _partitions(archive_dsn) <= 2  # this month (and the next, near its end) at most
    [detail] = rows(archive_dsn, "SELECT detail FROM archive_quarantine WHERE saga_id = 'past'")
    assert "behind the archiver's clock" in str(detail[0])


@pytest.mark.postgres
def test_a_partition_the_database_refuses_is_the_events_fate(archive_dsn: str) -> None:
    """When PostgreSQL refuses to make a month's partition (out of shared memory, here
    simulated), that month's events are quarantined (``partition_unavailable``) and the rest of
    the batch is archived: no crash loop."""
    import psycopg
    from archive_helpers import BASE_US, as_raw

    from sagacity.consumers.archive import BatchArchiver
    from sagacity.consumers.archive._ingest import QuarantineReason

    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.01,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        assert archiver.archive(as_raw(make_chain("earlier", 1))).archived == 1  # its month made
        with psycopg.connect(archive_dsn) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION sgc_ensure_month(at_us bigint) RETURNS text"
                " LANGUAGE plpgsql AS $$ BEGIN"
                " RAISE EXCEPTION 'out of shared memory' USING ERRCODE = '53200'; END $$"
            )
        refused = make_chain("refused-month", 2, start_us=BASE_US + 40 * 86_400_000_000)
        report = archiver.archive(as_raw([*refused, *make_chain("later", 2)], first_offset=1))
    finally:
        archiver.close()
    assert report.quarantined == {QuarantineReason.PARTITION_UNAVAILABLE: 2}
    assert report.archived == 2
    [detail] = rows(archive_dsn, "SELECT DISTINCT detail FROM archive_quarantine")
    assert "out of shared memory" in str(detail[0])
    assert rows(archive_dsn, "SELECT next_offset FROM archive_consumer_offset") == [(5,)]
