"""The archive schema on real Postgres: append-only, privileges, migrations, lost connections."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from archive_helpers import as_raw, decode, make_chain, rows, with_option

from sagacity.consumers.archive import BatchArchiver, generate_key, sign_pending
from sagacity.errors import ArchiveSchemaError, PersistenceError, PersistenceUnavailableError
from sagacity.postgres.archive import (
    MIGRATIONS,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    check_schema,
    grant_archiver,
    migrate,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres

LATEST = max(version for version, _ in MIGRATIONS)


def test_migrations_are_idempotent(archive_dsn):
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        assert migrate(conn) == LATEST
        assert migrate(conn) == LATEST
        assert check_schema(conn) == LATEST


def test_check_schema_refuses_a_schema_that_is_not_an_archive(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE side_effect_journal (x int)")
        with pytest.raises(ArchiveSchemaError, match="not a Sagacity archive"):
            check_schema(conn)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE side_effect_journal SET payload = 'x'",
        "DELETE FROM side_effect_journal",
        "TRUNCATE side_effect_journal",
        "UPDATE archive_quarantine SET reason = 'x'",
        "DELETE FROM archive_checkpoint",
        "UPDATE archive_checkpoint_round SET root = 'x'",
        "DELETE FROM archive_checkpoint_round",
        "TRUNCATE archive_checkpoint_round",
    ],
)
def test_evidence_tables_refuse_changes_even_to_their_owner(archiver, archive_dsn, statement):
    archiver.archive(as_raw(make_chain("saga-x", 2)))
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        if "quarantine" in statement or "checkpoint" in statement:
            pass  # empty tables: a row trigger would not fire, so add a row first
        if "quarantine" in statement:
            conn.execute(
                "INSERT INTO archive_quarantine (reason, detail, topic, kafka_partition,"
                " kafka_offset) VALUES ('gap', 'd', 't', 0, 1)"
            )
        if "checkpoint_round" in statement:
            conn.execute(
                "INSERT INTO archive_checkpoint_round VALUES (1, 1, 'r', 'p', 1, 'k', 'sig')"
            )
        elif "checkpoint" in statement:
            conn.execute(
                "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
                " signature) VALUES ('s', 1, 'h', 1, 'k', 'sig')"
            )
        with pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(statement)
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(2,)]


def test_a_month_partition_refuses_truncate_directly(archiver, archive_dsn):
    archiver.archive(as_raw(make_chain("saga-t", 1)))
    (name,) = rows(
        archive_dsn,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'side_effect_journal'::regclass",
    )[0]
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(f'TRUNCATE "{name}"')
        with pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(f'DELETE FROM "{name}"')


def test_archiver_role_may_insert_and_read_but_not_update_or_delete(archive_dsn, tmp_path):
    role = "sgc_test_" + uuid.uuid4().hex[:8]
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        grant_archiver(conn, role)
        conn.execute(f'GRANT "{role}" TO current_user')
    try:
        archiver = BatchArchiver(
            PostgresArchiveIngest(with_option(archive_dsn, f"-c role={role}")),
            consumer_group="g",
            decode=decode,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        # The role can archive (including creating a month partition through the function) and
        # sign its heads in a round.
        assert archiver.archive(as_raw(make_chain("saga-p", 3))).archived == 3
        archiver.close()
        with psycopg.connect(with_option(archive_dsn, f"-c role={role}")) as conn:
            assert (
                sign_pending(
                    PostgresCheckpointSigning(conn),
                    generate_key(tmp_path / "k.pem"),
                    archiver.ledger,
                )
                == 1
            )
        with psycopg.connect(archive_dsn, autocommit=True) as conn:
            conn.execute(f'SET ROLE "{role}"')
            assert conn.execute("SELECT count(*) FROM side_effect_journal").fetchone() == (3,)
            for statement in (
                "UPDATE side_effect_journal SET payload = 'x'",
                "DELETE FROM side_effect_journal",
                "TRUNCATE side_effect_journal",
                "DELETE FROM archive_checkpoint",
                "UPDATE archive_checkpoint_round SET root = 'x'",
                "DELETE FROM archive_checkpoint_round",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
    finally:
        with psycopg.connect(archive_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


class _DroppingArchiver(BatchArchiver):
    """Loses its database connection in the middle of the first ``drops`` batches."""

    def __init__(self, *args, drops: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.drops = drops

    def _store_offsets(self, unit, batch):
        if self.drops:
            self.drops -= 1
            pid = unit.cur.connection.info.backend_pid
            with psycopg.connect(self._store.conninfo, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        super()._store_offsets(unit, batch)


def test_database_lost_mid_batch_is_retried_without_loss_or_doubles(archive_dsn):
    chain = make_chain("saga-lost", 6)
    archiver = _DroppingArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        decode=decode,
        retry_delay=0.01,
        drops=2,
        partitioner=KAFKA_PARTITIONER,
    )
    try:
        report = archiver.archive(as_raw(chain[:4]))
        assert report.attempts == 3
        assert report.archived == 4
        # A batch whose commit reached the database but whose answer was lost is delivered
        # again: nothing is doubled.
        again = archiver.archive(as_raw(chain, first_offset=0))
        assert again.duplicates == 4
        assert again.archived == 2
    finally:
        archiver.close()
    assert rows(archive_dsn, "SELECT seq FROM side_effect_journal ORDER BY seq") == [
        (i,) for i in range(1, 7)
    ]
    assert rows(archive_dsn, "SELECT next_offset FROM archive_consumer_offset") == [(6,)]


def test_database_that_stays_away_raises_a_typed_error(archive_dsn):
    archiver = _DroppingArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        decode=decode,
        retries=2,
        retry_delay=0.01,
        drops=5,
        partitioner=KAFKA_PARTITIONER,
    )
    try:
        with pytest.raises(PersistenceUnavailableError):
            archiver.archive(as_raw(make_chain("saga-away", 2)))
    finally:
        archiver.close()
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(0,)]


def test_unreachable_database_is_a_persistence_error():
    archiver = BatchArchiver(
        PostgresArchiveIngest("host=127.0.0.1 port=1 connect_timeout=1"),
        consumer_group="g",
        decode=decode,
        retries=1,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    with pytest.raises(PersistenceError, match="unavailable"):
        archiver.archive(as_raw(make_chain("saga-none", 1)))


def test_two_archivers_racing_on_the_same_events_archive_each_once(archive_dsn):
    import threading

    chains = [make_chain(f"saga-race-{i}", 8) for i in range(20)]
    events = as_raw([e for c in chains for e in c])
    archivers = [
        BatchArchiver(
            PostgresArchiveIngest(archive_dsn),
            consumer_group="g",
            decode=decode,
            retry_delay=0.01,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        for _ in range(2)
    ]
    reports = []

    def run(a):
        for i in range(0, len(events), 16):
            reports.append(a.archive(events[i : i + 16]))

    threads = [threading.Thread(target=run, args=(a,)) for a in archivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for a in archivers:
        a.close()
    assert sum(r.archived for r in reports) == len(events)
    assert sum(r.duplicates for r in reports) == len(events)
    assert sum(r.quarantined_total for r in reports) == 0
    assert rows(
        archive_dsn, "SELECT count(*), count(DISTINCT (saga_id, seq)) FROM side_effect_journal"
    ) == [(len(events), len(events))]


def test_archiver_role_starts_on_a_migrated_archive_but_cannot_migrate(archive_dsn):
    from sagacity.postgres.archive import ensure_schema

    role = "sgc_test_" + uuid.uuid4().hex[:8]
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        grant_archiver(conn, role)
        conn.execute(f'GRANT "{role}" TO current_user')
    try:
        with psycopg.connect(with_option(archive_dsn, f"-c role={role}")) as conn:
            assert ensure_schema(conn) == LATEST
            with pytest.raises(PersistenceError, match="permission denied"):
                migrate(conn)
    finally:
        with psycopg.connect(archive_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_ensure_schema_creates_a_missing_archive(pg_dsn):
    from sagacity.postgres.archive import ensure_schema

    with psycopg.connect(pg_dsn) as conn:
        assert ensure_schema(conn) == LATEST
        assert check_schema(conn) == LATEST
