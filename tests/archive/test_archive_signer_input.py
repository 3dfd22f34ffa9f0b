"""The archive signs only what its own ingest read from the topic (docs/adr/0012, "The signer's
input"): a row and a head written into the database by someone without the signing key stay an
unsigned tail that ``verify --require-signed`` fails, on real Kafka and PostgreSQL, also across a
restart of the archiver."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from archive_helpers import as_raw, encode, make_chain, rows
from click.testing import CliRunner
from confluent_kafka import Producer

from sagacity import compose
from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.archive import (
    BatchArchiver,
    Signer,
    audit,
    generate_key,
    sign_pending,
)
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = [pytest.mark.postgres]

_COLUMNS = (
    "saga_id, seq, event_type, tool, payload, result, error, actor, attributes,"
    " recorded_at_us, hash, prev_hash, topic, kafka_partition, kafka_offset"
)


def _produce(bootstrap: str, topic: str, entries: list[JournalEntry]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for e in entries:
        producer.produce(topic, key=e.saga_id.encode(), value=encode(e))
    assert producer.flush(30) == 0


def _wait(check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _signed(dsn: str, saga_id: str, seq: int) -> bool:
    found = rows(
        dsn, "SELECT 1 FROM archive_checkpoint WHERE saga_id = %s AND seq = %s", (saga_id, seq)
    )
    return bool(found)


def _forge_append(dsn: str, after: JournalEntry) -> JournalEntry:
    """As a database writer without the signing key: a correctly hashed event appended to the
    saga's rows, and the saga's head moved onto it."""
    forged = link(
        EntryDraft(
            saga_id=after.saga_id,
            event_type=EventType.EXECUTED,
            tool="refund",
            result="wired to mallory",
            recorded_at_us=after.recorded_at_us + 1_000,
        ),
        seq=after.seq + 1,
        prev_hash=after.hash,
    )
    with psycopg.connect(dsn) as conn:
        conn.execute(
            f"INSERT INTO side_effect_journal ({_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 't', 0, 999)",
            (
                forged.saga_id,
                forged.seq,
                forged.event_type.value,
                forged.tool,
                forged.payload,
                forged.result,
                forged.error,
                forged.actor,
                json.dumps(dict(forged.attributes)),
                forged.recorded_at_us,
                forged.hash,
                forged.prev_hash,
            ),
        )
        conn.execute(
            "UPDATE archive_saga_head SET head_seq = %s, head_hash = %s WHERE saga_id = %s",
            (forged.seq, forged.hash, forged.saga_id),
        )
    return forged


def _verify(dsn: str, saga_id: str, signer: Signer) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        [
            "verify",
            "--database-url",
            dsn,
            "--saga",
            saga_id,
            "--public-key",
            signer.public_hex,
            "--require-signed",
        ],
    )
    return result.exit_code, result.stdout + result.stderr


class Services:
    """Archive services on one consumer group, each on its thread."""

    def __init__(self, bootstrap: str, dsn: str) -> None:
        self._bootstrap, self._dsn = bootstrap, dsn
        self._group = f"g-{uuid.uuid4().hex[:6]}"
        self._threads: dict[int, tuple[ArchiveService, threading.Thread]] = {}

    def start(self, topic: str, **settings: Any) -> ArchiveService:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=self._bootstrap,
                database_url=self._dsn,
                topic=topic,
                group_id=self._group,
                batch_size=50,
                poll_timeout=0.2,
                checkpoint_interval=0.3,
                **settings,
            ),
            dependencies=compose.archive(),
        )
        runner = threading.Thread(target=service.run)
        runner.start()
        self._threads[id(service)] = (service, runner)
        return service

    def stop(self, service: ArchiveService) -> None:
        service.stop()
        _, runner = self._threads.pop(id(service))
        runner.join(30)
        assert not runner.is_alive()

    def stop_all(self) -> None:
        for service, _ in list(self._threads.values()):
            self.stop(service)


@pytest.fixture
def services(kafka_bootstrap: str, archive_dsn: str) -> Iterator[Services]:
    running = Services(kafka_bootstrap, archive_dsn)
    yield running
    running.stop_all()


@pytest.mark.kafka
def test_a_forged_row_and_a_moved_head_stay_an_unsigned_tail(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    services: Services,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    signer = generate_key(tmp_path / "archive.key")
    victim = make_chain("victim", 4)
    _produce(kafka_bootstrap, topic, victim)
    service = services.start(topic, signing_key=tmp_path / "archive.key")
    _wait(lambda: _signed(archive_dsn, "victim", 4), "the victim's head signed")
    forged = _forge_append(archive_dsn, victim[-1])
    # Later traffic, signed: a signing round ran after the forgery.
    _produce(kafka_bootstrap, topic, make_chain("later", 2))
    _wait(lambda: _signed(archive_dsn, "later", 2), "a later saga signed")
    assert not _signed(archive_dsn, "victim", forged.seq)
    _wait(
        lambda: rows(archive_dsn, "SELECT reason FROM archive_finding WHERE saga_id = 'victim'"),
        "the moved head reported",
    )
    services.stop(service)
    assert not _signed(archive_dsn, "victim", forged.seq)
    code, out = _verify(archive_dsn, "victim", signer)
    assert code == 1, out
    assert "unsigned" in out
    assert rows(archive_dsn, "SELECT reason FROM archive_finding WHERE saga_id = 'victim'") == [
        ("head_moved",)
    ]
    assert service.metrics.findings.labels(reason="head_moved")._value.get() == 1
    code, out = _verify(archive_dsn, "later", signer)
    assert code == 0, out


@pytest.mark.kafka
def test_a_restarted_archiver_signs_what_it_reads_again_and_not_what_it_never_read(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    services: Services,
    tmp_path: Path,
) -> None:
    """An archiver that archived and never signed (it died first, or ran without a key) left
    unsigned rows; someone then forged an append to one saga.  The next archiver reads each
    partition again from where everything was last signed: it signs the events it re-read from
    the topic, and not the forged one, which the topic never held."""
    topic = make_topic(partitions=2)
    signer = generate_key(tmp_path / "archive.key")
    crashed, other = make_chain("crashed", 3), make_chain("other", 2)
    _produce(kafka_bootstrap, topic, crashed + other)
    first = services.start(topic)  # archives, signs nothing
    _wait(lambda: rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(5,)], "rows")
    services.stop(first)
    forged = _forge_append(archive_dsn, crashed[-1])
    second = services.start(topic, signing_key=tmp_path / "archive.key")
    _wait(lambda: _signed(archive_dsn, "crashed", 3), "the re-read head signed")
    _wait(lambda: _signed(archive_dsn, "other", 2), "the other saga signed")
    services.stop(second)
    assert not _signed(archive_dsn, "crashed", forged.seq)
    code, out = _verify(archive_dsn, "crashed", signer)
    assert code == 1, out
    assert "unsigned" in out
    code, out = _verify(archive_dsn, "other", signer)
    assert code == 0, out


def test_a_new_process_resumes_a_saga_from_its_verified_checkpoint(
    archive_dsn: str, tmp_path: Path
) -> None:
    """A saga signed by an earlier process goes on being signed by the next one, which verifies
    the checkpoint under its key instead of trusting the table."""
    signer = generate_key(tmp_path / "archive.key")
    chain = make_chain("long", 5)
    earlier = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    earlier.archive(as_raw(chain[:3]))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, earlier.ledger) == 1
    earlier.close()
    later = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        signed_keys=[signer.public_raw],
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    report = later.archive(as_raw(chain[3:], first_offset=3))
    assert (report.archived, report.findings) == (2, {})
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, later.ledger) == 1
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    later.close()
    assert (summary.ok, summary.unsigned_sagas, summary.unsigned_tails) == (1, 0, 0)


def test_a_checkpoint_the_key_did_not_sign_is_no_base(archive_dsn: str, tmp_path: Path) -> None:
    """A checkpoint row written into the table (no valid round under the archive's key) does not
    let the next process sign what follows it: the saga is reported ``unattested``."""
    signer = generate_key(tmp_path / "archive.key")
    chain = make_chain("planted", 4)
    earlier = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    earlier.archive(as_raw(chain[:3]))
    earlier.close()
    with psycopg.connect(archive_dsn) as conn:
        conn.execute(
            "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
            " round_id, leaf_index) VALUES ('planted', 3, %s, 1, %s, 77, 0)",
            (chain[2].hash, signer.key_id),
        )
    later = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        signed_keys=[signer.public_raw],
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    report = later.archive(as_raw(chain[3:], first_offset=3))
    assert (report.archived, report.findings) == (1, {"unattested": 1})
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, later.ledger) == 0
    later.close()
    assert rows(archive_dsn, "SELECT reason, ingested_seq, table_seq FROM archive_finding") == [
        ("unattested", 0, 3)
    ]


def test_the_signer_signs_what_its_ledger_holds_and_nothing_the_table_adds(
    archive_dsn: str, tmp_path: Path
) -> None:
    """A saga written into the tables alone (rows and a head, never read from the topic) is not
    signed, however it looks; the sagas the process read are."""
    signer = generate_key(tmp_path / "archive.key")
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    archiver.archive(as_raw(make_chain("read", 2)))
    planted = make_chain("planted", 2)
    helper = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="other",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    helper.archive(as_raw(planted, partition=5))  # rows and head, by another hand
    helper.close()
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 1
    archiver.close()
    assert _signed(archive_dsn, "read", 2)
    assert not _signed(archive_dsn, "planted", 2)


def _superuser(dsn: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")  # triggers off, as a superuser can
        for sql, params in statements:
            conn.execute(sql, params)


def _rewrite_row(dsn: str, old: JournalEntry, new: JournalEntry) -> None:
    """Replace the archived row of ``old`` by ``new`` (same seq) and move the head onto it."""
    _superuser(
        dsn,
        ("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq = %s", (old.saga_id, old.seq)),
        (
            "UPDATE archive_saga_head SET head_seq = %s, head_hash = %s WHERE saga_id = %s",
            (new.seq, new.hash, new.saga_id),
        ),
    )
    with psycopg.connect(dsn) as conn:
        conn.execute(
            f"INSERT INTO side_effect_journal ({_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 't', 0, 999)",
            (
                new.saga_id,
                new.seq,
                new.event_type.value,
                new.tool,
                new.payload,
                new.result,
                new.error,
                new.actor,
                json.dumps(dict(new.attributes)),
                new.recorded_at_us,
                new.hash,
                new.prev_hash,
            ),
        )


def test_reading_again_attests_the_topics_chain_not_the_tables(
    archive_dsn: str, tmp_path: Path
) -> None:
    """Seq 2 of a saga was forked on the topic: the first in offset order is its chain, the
    other was quarantined.  Someone rewrites the table to the losing event.  The next process
    reads the partition again: the event the table now holds is not the topic's, so nothing
    past seq 1 is signed."""
    signer = generate_key(tmp_path / "archive.key")
    winner = make_chain("forked", 2)
    loser = link(
        EntryDraft(
            saga_id="forked",
            event_type=EventType.EXECUTED,
            tool="refund",
            result="no",
            recorded_at_us=winner[1].recorded_at_us + 1,
        ),
        seq=2,
        prev_hash=winner[0].hash,
    )
    messages = as_raw([*winner, loser], topic="t")
    earlier = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    assert earlier.archive(messages).quarantined_total == 1  # the loser: a fork
    earlier.close()
    _rewrite_row(archive_dsn, winner[1], loser)
    later = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        signed_keys=[signer.public_raw],
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    assert later.start_offsets("t") == {0: 0}
    report = later.archive(messages)
    assert (report.again, report.archived, report.quarantined_total) == (3, 0, 0)
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, later.ledger) == 1
    later.close()
    assert _signed(archive_dsn, "forked", 1)
    assert not _signed(archive_dsn, "forked", 2)
    assert rows(archive_dsn, "SELECT reason, ingested_seq, table_seq FROM archive_finding") == [
        ("head_moved", 1, 2)
    ]


def test_reading_again_does_not_attest_an_event_its_writer_may_not_write(
    archive_dsn: str, tmp_path: Path
) -> None:
    """With a writer registry, agent-2's append into agent-1's saga was quarantined
    (``writer_not_owner``).  Someone copies it into the table.  Read again after a restart, it
    is found there, but the writer rule refuses it again: reported, never signed."""
    from sagacity.consumers.archive import Authorship, RawEvent
    from sagacity.entries import _attributes as attr
    from sagacity.signing._writer_roles import WriterRole
    from sagacity.signing._writer_signature import HEADER, WriterKey, WriterRegistry

    signer = generate_key(tmp_path / "archive.key")
    keys = {}
    for writer in ("agent-1", "agent-2"):
        (tmp_path / writer).write_text(f"hmac-sha256:{writer.encode().hex() * 4}\n")
        keys[writer] = WriterKey.from_file(tmp_path / writer, writer)
    registry = tmp_path / "writers.toml"
    registry.write_text("".join(k.registry_entry(WriterRole.AGENT) for k in keys.values()))
    authorship = Authorship(writers=WriterRegistry.from_file(registry))

    def signed_by(writer: str, draft: EntryDraft, after: JournalEntry | None) -> JournalEntry:
        draft = EntryDraft(
            saga_id=draft.saga_id,
            event_type=draft.event_type,
            tool=draft.tool,
            result=draft.result,
            attributes={**draft.attributes, attr.WRITER: writer},
            recorded_at_us=draft.recorded_at_us,
        )
        return link(
            draft,
            seq=1 if after is None else after.seq + 1,
            prev_hash="0" * 64 if after is None else after.hash,
        )

    opened = signed_by(
        "agent-1", EntryDraft(saga_id="owned", event_type=EventType.SAGA_OPENED), None
    )
    intruding = signed_by(
        "agent-2",
        EntryDraft(saga_id="owned", event_type=EventType.EXECUTED, tool="t", result="x"),
        opened,
    )
    messages = [
        RawEvent(
            topic="t",
            partition=0,
            offset=i,
            key=b"owned",
            value=encode(e),
            headers={
                HEADER: keys[e.attributes[attr.WRITER]].sign(
                    saga_id=e.saga_id, seq=e.seq, hash=e.hash
                )
            },
        )
        for i, e in enumerate((opened, intruding))
    ]
    earlier = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        authorship=authorship,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    report = earlier.archive(messages)
    earlier.close()
    assert (report.archived, {r.value: n for r, n in report.quarantined.items()}) == (
        1,
        {"writer_not_owner": 1},
    )
    with psycopg.connect(archive_dsn) as conn:  # the copy, as a database writer
        conn.execute(
            f"INSERT INTO side_effect_journal ({_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 't', 0, 1)",
            (
                intruding.saga_id,
                intruding.seq,
                intruding.event_type.value,
                intruding.tool,
                intruding.payload,
                intruding.result,
                intruding.error,
                intruding.actor,
                json.dumps(dict(intruding.attributes)),
                intruding.recorded_at_us,
                intruding.hash,
                intruding.prev_hash,
            ),
        )
        conn.execute(
            "UPDATE archive_saga_head SET head_seq = 2, head_hash = %s WHERE saga_id = 'owned'",
            (intruding.hash,),
        )
    later = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        authorship=authorship,
        signed_keys=[signer.public_raw],
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    later.start_offsets("t")
    report = later.archive(messages)
    assert (report.again, report.findings) == (2, {"unattested": 1})
    with psycopg.connect(archive_dsn) as conn:
        # seq 1, read again
        assert sign_pending(PostgresCheckpointSigning(conn), signer, later.ledger) == 1
    later.close()
    assert _signed(archive_dsn, "owned", 1)
    assert not _signed(archive_dsn, "owned", 2)
