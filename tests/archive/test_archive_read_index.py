"""The archive as the readers' per-saga index (docs/adr/0010-saga-read-index.md): on real Kafka
and Postgres, a read through the index gives the full scan's result, reads only the partition
past the archiver's offset, and falls back to the scan whenever the index cannot be trusted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import psycopg
import pytest
from archive_helpers import make_chain, rows
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import Reversibility, Sagacity, SagaStatus, compensable
from sagacity.consumers.archive import BatchArchiver, RawEvent, generate_key
from sagacity.consumers.archive._retention import run_retention
from sagacity.errors import SagaExistsError
from sagacity.postgres import PostgresSagaIndex
from sagacity.postgres.archive import PostgresArchiveIngest, PostgresRetention
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal, SagaReader, partition_for
from sagacity.schemas import JOURNAL_WIRE, encode_entry
from tests.kafka.saga_mix import accepted, reported, write_mix

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
GROUP = "archive-under-test"


def archive_topic(
    bootstrap: str, topic: str, partitions: int, dsn: str, *, upto: float = 1.0
) -> None:
    """Archive the first ``upto`` of each partition (from where the archive stopped), in
    batches of 97 messages, the way the archiver service does."""
    archiver = BatchArchiver(
        PostgresArchiveIngest(dsn),
        consumer_group=GROUP,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    try:
        stored = archiver.stored_offsets(topic)
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            start = stored.get(p, low)
            end = int(high * upto)
            if end <= start:
                continue
            consumer.assign([TopicPartition(topic, p, start)])
            batch: list[RawEvent] = []
            position = start
            while position < end:
                for m in consumer.consume(num_messages=min(500, end - position), timeout=5):
                    assert m.error() is None
                    offset = m.offset() or 0
                    if offset >= end:
                        position = end
                        break
                    position = offset + 1
                    batch.append(
                        RawEvent(
                            topic=topic, partition=p, offset=offset, key=m.key(), value=m.value()
                        )
                    )
                    if len(batch) == 97:
                        archiver.archive(batch)
                        batch = []
            if batch:
                archiver.archive(batch)
    finally:
        consumer.close()
        archiver.close()


@pytest.fixture
def reader_pair(
    kafka_bootstrap: str, archive_dsn: str
) -> Iterator[Callable[[str, int], tuple[SagaReader, SagaReader]]]:
    """``pair(topic, partitions) -> (plain reader, reader with the archive as index)``."""
    made: list[SagaReader] = []

    def make(topic: str, partitions: int) -> tuple[SagaReader, SagaReader]:
        config = {"bootstrap.servers": kafka_bootstrap}
        plain = SagaReader(config, topic, partitions=partitions)
        index = PostgresSagaIndex(archive_dsn, consumer_group=GROUP)
        indexed = SagaReader(config, topic, partitions=partitions, index=index)
        made.extend([plain, indexed])
        return plain, indexed

    yield make
    for reader in made:
        reader.close()


def assert_same(plain: SagaReader, indexed: SagaReader, ids: list[str]) -> list[str]:
    """Every saga reads the same both ways; returns how each indexed read was made."""
    sources = []
    for saga in ids:
        full = plain.read(saga)
        fast = indexed.read(saga)
        assert accepted(fast) == accepted(full), saga
        # The archiver drops redelivered duplicates, so only those may be missing.
        assert reported(fast, duplicates=False) == reported(full, duplicates=False), saga
        assert fast.next_offset == full.next_offset
        sources.append(fast.source)
    return sources


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_indexed_reads_equal_the_full_scan_never_behind_and_caught_up(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair, seed
):
    topic = make_topic(partitions=2)
    ids = write_mix(kafka_bootstrap, topic, partitions=2, sagas=16, events=1200, seed=seed)
    plain, indexed = reader_pair(topic, 2)
    never = [indexed.read(s) for s in ids]
    assert {r.source for r in never} == {"scan"}
    assert all("has not read partition" in (r.index_fallback or "") for r in never)
    assert_same(plain, indexed, ids)

    archive_topic(kafka_bootstrap, topic, 2, archive_dsn, upto=0.5)
    assert set(assert_same(plain, indexed, ids)) == {"index"}

    archive_topic(kafka_bootstrap, topic, 2, archive_dsn)
    assert set(assert_same(plain, indexed, ids)) == {"index"}
    # The mix really holds what the rule must handle, and the archive refused some of it.
    assert any(r.kind.value == "fork" for s in ids for r in plain.read(s).rejected)
    assert any(r.kind.value == "foreign" for s in ids for r in plain.read(s).rejected)
    assert any(plain.read(s).skipped for s in ids)
    reasons = {r[0] for r in rows(archive_dsn, "SELECT DISTINCT reason FROM archive_quarantine")}
    assert {"fork", "foreign", "edited", "undecodable"} <= reasons


def test_events_in_a_partition_their_key_does_not_map_to_make_the_read_scan(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair
):
    topic = make_topic(partitions=2)
    ids = write_mix(
        kafka_bootstrap, topic, partitions=2, sagas=6, events=300, seed=5, wrong_partition=True
    )
    # A saga opened by a writer that picked the other partition: the archiver accepts it,
    # a scan of the key's partition never sees it.
    chain = make_chain("stray-saga", 2)
    right = partition_for(b"stray-saga", 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"stray-saga", value=encode_entry(chain[0]), partition=1 - right)
    producer.produce(topic, key=b"stray-saga", value=encode_entry(chain[1]), partition=right)
    assert producer.flush(30) == 0
    archive_topic(kafka_bootstrap, topic, 2, archive_dsn)
    plain, indexed = reader_pair(topic, 2)
    assert "index" in assert_same(plain, indexed, [*ids, "stray-saga"])
    stray = indexed.read("stray-saga")
    assert stray.source == "scan"
    assert "which a scan of partition" in (stray.index_fallback or "")
    assert stray.entries == []


def test_an_indexed_read_reads_only_the_partition_past_the_archive(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair
):
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    chain = make_chain("big-one", 6)
    for i in range(4000):
        producer.produce(topic, key=f"other-{i}".encode(), value=b"x", partition=0)
        if i % 700 == 0 and i // 700 < 4:
            producer.produce(
                topic, key=b"big-one", value=encode_entry(chain[i // 700]), partition=0
            )
    assert producer.flush(30) == 0
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    for e in chain[4:]:
        producer.produce(topic, key=b"big-one", value=encode_entry(e), partition=0)
    for i in range(20):
        producer.produce(topic, key=f"late-{i}".encode(), value=b"x", partition=0)
    assert producer.flush(30) == 0
    plain, indexed = reader_pair(topic, 1)
    before = (plain.messages_read, indexed.messages_read)
    full, fast = plain.read("big-one"), indexed.read("big-one")
    assert [e.seq for e in fast.entries] == [1, 2, 3, 4, 5, 6]
    assert accepted(fast) == accepted(full)
    assert plain.messages_read - before[0] == 4026
    assert indexed.messages_read - before[1] == 22  # the two events and 20 others past it


def test_a_chain_whose_oldest_months_retention_dropped_starts_at_its_anchor(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair, tmp_path
):
    from test_archive_retention import JUN_2025, NOW, OCT_2024, _retime

    topic = make_topic(partitions=1)
    span = _retime(make_chain("saga-span", 5, start_us=OCT_2024), JUN_2025)
    old = make_chain("saga-old", 2, start_us=OCT_2024)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for e in [*span, *old]:
        producer.produce(topic, key=e.saga_id.encode(), value=encode_entry(e), partition=0)
    assert producer.flush(30) == 0
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    with psycopg.connect(archive_dsn) as conn:
        signer = generate_key(tmp_path / "archive.key")
        (action,) = run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path / "x",
            apply=True,
            now=NOW,
            signer=signer,
        )
    assert action.dropped
    plain, indexed = reader_pair(topic, 1)
    fast = indexed.read("saga-span")
    assert fast.source == "index"
    assert (fast.base_seq, fast.base_hash) == (3, span[2].hash)
    assert [e.seq for e in fast.entries] == [4, 5]
    assert fast.tail == plain.read("saga-span").tail == (5, span[4].hash)
    assert fast.accepted_offset(4) == plain.read("saga-span").accepted_offset(4)
    gone = indexed.read("saga-old")
    assert gone.source == "index"
    assert (gone.entries, gone.tail) == ([], (2, old[1].hash))
    # A rival at a seq the anchor covers is a fork, never accepted.
    assert all(r.kind.value != "duplicate" for r in gone.rejected)
    index = PostgresSagaIndex(archive_dsn, consumer_group=GROUP)
    try:
        names = ["saga-span", "saga-old", "saga-never"]
        assert index.lookup_many(topic, 0, names) == {n: index.lookup(topic, 0, n) for n in names}
    finally:
        index.close()


def test_an_index_on_a_schema_without_an_archive_falls_back_to_the_scan(
    kafka_bootstrap, make_topic, pg_dsn, caplog
):
    topic = make_topic(partitions=1)
    ids = write_mix(kafka_bootstrap, topic, partitions=1, sagas=3, events=60, seed=9)
    config = {"bootstrap.servers": kafka_bootstrap}
    plain = SagaReader(config, topic, partitions=1)
    wrong = SagaReader(config, topic, partitions=1, index=PostgresSagaIndex(pg_dsn))
    gone = SagaReader(
        config,
        topic,
        partitions=1,
        index=PostgresSagaIndex("postgresql://nobody@127.0.0.1:9/none", timeout=1),
    )
    try:
        with caplog.at_level(logging.WARNING, logger="sagacity.reader"):
            for reader, expected in ((wrong, "is not a Sagacity archive"), (gone, "unavailable")):
                read = reader.read(ids[0])
                assert read.source == "scan"
                assert expected in (read.index_fallback or ""), read.index_fallback
                assert accepted(read) == accepted(plain.read(ids[0]))
                assert reported(read) == reported(plain.read(ids[0]))
        assert any("scanning partition 0 instead" in r.getMessage() for r in caplog.records)
    finally:
        for reader in (plain, wrong, gone):
            reader.close()


def _in_clear(monkeypatch):
    """The read index serves sagas journaled in clear (a sealed journal reads the topic,
    docs/adr/0019-erasure.md): these agents run in clear, said explicitly."""
    monkeypatch.delenv("SAGACITY_KEY_ENCRYPTION_KEY_FILE", raising=False)
    monkeypatch.setenv("SAGACITY_ALLOW_CLEAR_DATA", "1")


def test_a_database_without_an_archive_is_reported_once_per_process(
    kafka_bootstrap, make_topic, pg_dsn, monkeypatch, caplog
):
    _in_clear(monkeypatch)
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_TOPIC", make_topic(partitions=2))
    monkeypatch.setenv("SAGACITY_DATABASE_URL", pg_dsn)  # a schema without an archive
    agents = [Sagacity.from_env(), Sagacity.from_env()]  # as a process building one per job
    try:
        with caplog.at_level(logging.DEBUG, logger="sagacity"):
            for n, agent in enumerate(agents * 2):
                assert agent.saga(f"no-archive-{n}", lambda: None).status is SagaStatus.COMPLETED
        said = [r for r in caplog.records if "is not a Sagacity archive" in r.getMessage()]
        warned = [r for r in said if r.levelno >= logging.WARNING]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert "read by scanning" in warned[0].getMessage()
        assert len(said) > 1  # every fallback is still logged, at DEBUG
    finally:
        for agent in agents:
            agent.journal.close()


def _owner_edit(dsn: str, statement: str, params: tuple[object, ...] = ()) -> None:
    """Change archived evidence as the schema owner would, triggers disabled."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(statement, params)


def test_an_edited_archive_is_detected_and_the_read_scans(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair, caplog
):
    topic = make_topic(partitions=1)
    ids = write_mix(kafka_bootstrap, topic, partitions=1, sagas=4, events=200, seed=13)
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    plain, indexed = reader_pair(topic, 1)
    victim, cut, hidden = ids[0], ids[1], ids[2]
    assert indexed.read(victim).source == "index"
    _owner_edit(
        archive_dsn,
        "UPDATE side_effect_journal SET payload = '{\"n\":0}' WHERE saga_id = %s AND seq = 2",
        (victim,),
    )
    # A cut tail: the last row deleted, the head left alone.
    _owner_edit(
        archive_dsn,
        "DELETE FROM side_effect_journal WHERE saga_id = %s"
        " AND seq = (SELECT max(seq) FROM side_effect_journal WHERE saga_id = %s)",
        (cut, cut),
    )
    # A refused message removed from quarantine: the chains still equal the scan (the rule
    # rejected it anyway), only its report is missing.
    _owner_edit(
        archive_dsn, "DELETE FROM archive_quarantine WHERE raw_key = %s", (hidden.encode(),)
    )
    with caplog.at_level(logging.ERROR, logger="sagacity.reader"):
        edited = indexed.read(victim)
        truncated = indexed.read(cut)
    assert edited.source == "scan"
    assert "does not check out" in (edited.index_fallback or "")
    assert "edited" in (edited.index_fallback or "")
    assert truncated.source == "scan"
    assert "archived head" in (truncated.index_fallback or "")
    for read, saga in ((edited, victim), (truncated, cut)):
        assert accepted(read) == accepted(plain.read(saga))
    assert sum(r.levelno == logging.ERROR for r in caplog.records) == 2
    assert accepted(indexed.read(hidden)) == accepted(plain.read(hidden))


def test_rows_archived_before_keys_were_checked_are_not_taken_from_the_index(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair
):
    topic = make_topic(partitions=1)
    ids = write_mix(kafka_bootstrap, topic, partitions=1, sagas=3, events=90, seed=17)
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    # What migration 3 records for an archive an earlier release filled.
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("UPDATE archive_consumer_offset SET keys_checked_from = next_offset")
    plain, indexed = reader_pair(topic, 1)
    read = indexed.read(ids[0])
    assert read.source == "scan"
    assert "without checking its message key" in (read.index_fallback or "")
    assert accepted(read) == accepted(plain.read(ids[0]))
    assert partition_for(ids[0].encode(), 1) == 0


class _Gate:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: int) -> str:
        return f"wired {amount}"


def test_one_lookup_of_many_sagas_equals_a_lookup_of_each(kafka_bootstrap, make_topic, archive_dsn):
    """Forks, duplicates, refused (quarantined) messages, an unknown saga: one snapshot of
    many sagas gives each saga what its own lookup gives, in chunks of any size."""
    topic = make_topic(partitions=1)
    ids = write_mix(kafka_bootstrap, topic, partitions=1, sagas=6, events=240, seed=5)
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine")[0][0] > 0
    index = PostgresSagaIndex(archive_dsn, consumer_group=GROUP)
    try:
        names = [*ids, "never-written"]
        one_by_one = {n: index.lookup(topic, 0, n) for n in names}
        assert index.lookup_many(topic, 0, names) == one_by_one
        assert one_by_one["never-written"].events == ()
        import sagacity.postgres._index as index_module

        chunk = index_module._MANY
        index_module._MANY = 2  # several statements within the one snapshot
        try:
            assert index.lookup_many(topic, 0, names) == one_by_one
        finally:
            index_module._MANY = chunk
    finally:
        index.close()


def test_pending_approvals_through_the_index_equal_the_scan(
    kafka_bootstrap, make_topic, archive_dsn
):
    topic = make_topic(partitions=3)
    plain = KafkaJournal(kafka_bootstrap, topic=topic)
    indexed = KafkaJournal(
        kafka_bootstrap, topic=topic, index=PostgresSagaIndex(archive_dsn, consumer_group=GROUP)
    )
    try:
        agent = Sagacity(plain, compensation="delegated")
        tools = agent.wrap(_Gate())
        gated = []
        for i in range(12):
            result = agent.saga(f"gate-{topic}-{i}", lambda i=i: tools.wire(i))
            assert result.status is SagaStatus.AWAITING_APPROVAL
            gated.append((f"gate-{topic}-{i}", result.awaiting_seq))
        for saga, seq in gated[:3]:
            agent.reject(saga, seq, "auditor@example.com", reason="no")
        plain.flush()
        archive_topic(kafka_bootstrap, topic, 3, archive_dsn)
        for saga, seq in gated[3:5]:  # decided after the archive stopped
            agent.reject(saga, seq, "auditor@example.com", reason="late")
        assert agent.saga(f"late-{topic}", lambda: tools.wire(99)).awaiting_seq
        plain.flush()
        expected = plain.pending_approvals()
        assert len(expected) == 8
        before = indexed.reader.messages_read
        index = indexed.reader.index
        assert isinstance(index, PostgresSagaIndex)
        calls = {"lookup": 0, "lookup_many": 0}
        for name in calls:
            original = getattr(index, name)

            def counted(*args, _name=name, _original=original):
                calls[_name] += 1
                return _original(*args)

            setattr(index, name, counted)
        assert indexed.pending_approvals() == expected
        # One snapshot of the candidate sagas per partition holding any, not one lookup per
        # saga: the candidates are the sagas still gated in the archive and those written past
        # the archiver.
        candidates = [saga for saga, _ in gated[3:]] + [f"late-{topic}"]
        holding = {partition_for(saga.encode(), 3) for saga in candidates}
        assert calls == {"lookup": 0, "lookup_many": len(holding)}
        # Only the partitions past the archiver (the late rejections and the late saga) and
        # nothing before it: far fewer messages than one scan of the topic.
        assert indexed.reader.messages_read - before < 20
        assert sum(1 for _ in expected) == 8
    finally:
        plain.close()
        indexed.close()


def test_sagacity_from_env_reads_through_the_archive(
    kafka_bootstrap, make_topic, archive_dsn, monkeypatch
):
    topic = make_topic(partitions=1)
    _in_clear(monkeypatch)
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_TOPIC", topic)
    monkeypatch.setenv("SAGACITY_DATABASE_URL", archive_dsn)
    monkeypatch.setenv("SAGACITY_ARCHIVE_GROUP", GROUP)
    agent = Sagacity.from_env()
    journal = agent.journal
    try:
        assert isinstance(journal, KafkaJournal)
        assert isinstance(journal.reader.index, PostgresSagaIndex)
        assert agent.saga("env-1", lambda: None).status is SagaStatus.COMPLETED
        journal.flush()
        archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
        read = journal.reader.read("env-1")
        assert read.source == "index"
        assert [e.event_type.value for e in read.entries] == ["SAGA_OPENED", "SAGA_ENDED"]
        # A second run of the same id is still refused.
        with pytest.raises(SagaExistsError):
            agent.saga("env-1", lambda: None)
    finally:
        journal.close()


def test_migration_3_marks_rows_archived_before_it_as_unchecked(pg_dsn):
    from psycopg import sql

    from sagacity.postgres.archive import MIGRATIONS, migrate

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        quoted = sql.Identifier(schema).as_string(conn)
        conn.execute(
            "CREATE TABLE archive_schema_version (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, text in MIGRATIONS[:2]:
            conn.execute(text.replace("@schema@", quoted).encode())
            conn.execute("INSERT INTO archive_schema_version (version) VALUES (%s)", (version,))
        conn.execute(
            "INSERT INTO archive_consumer_offset (consumer_group, topic, kafka_partition,"
            " next_offset) VALUES ('g', 't', 0, 120)"
        )
        assert migrate(conn) == max(v for v, _ in MIGRATIONS)
    assert rows(pg_dsn, "SELECT next_offset, keys_checked_from FROM archive_consumer_offset") == [
        (120, 120)
    ]


def test_a_form_2_saga_reads_the_same_through_the_index(
    kafka_bootstrap, make_topic, archive_dsn, reader_pair
):
    """docs/adr/0019-erasure.md: the index returns a form-2 entry with its commitments and
    salts, as the topic holds it (an index without them would return entries that no longer
    hash)."""
    import dataclasses

    from sagacity import verify
    from sagacity.chain import committing, link

    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    chain = []
    prev = "0" * 64
    for entry in make_chain("committed-one", 4):
        chain.append(link(committing(dataclasses.replace(entry)), seq=entry.seq, prev_hash=prev))
        prev = chain[-1].hash
    for e in chain:
        producer.produce(topic, key=b"committed-one", value=encode_entry(e), partition=0)
    assert producer.flush(30) == 0
    archive_topic(kafka_bootstrap, topic, 1, archive_dsn)
    plain, indexed = reader_pair(topic, 1)
    full, fast = plain.read("committed-one"), indexed.read("committed-one")
    assert fast.source != full.source
    assert list(fast.entries) == list(full.entries) == chain
    assert all(e.form == 2 for e in fast.entries)
    assert [bool(e.commitments) for e in fast.entries] == [False, True, True, True]
    assert verify(fast.entries).ok
