"""The archive on a database that does not sort text byte by byte (real PostgreSQL).

The test suite's database is C-collated; a user's production database usually is not (an
ICU or libc locale such as en-US, where ``"alpha" < "Zeta"`` and punctuation is ignored at
first). The audit merges streams that must come in one order — the chains, the signed
checkpoints, the heads, the retention anchors, the stories — and Python compares saga ids by
their bytes, so every ordered read names ``COLLATE "C"``. Here an archive lives in a database
of its own whose default collation is ICU's en-US, with saga ids whose two orders differ, and
goes through ingest, signing, every audit path, retention, verify and the watch. Without
``COLLATE "C"`` in the chain stream's order or in the audit's reads these tests fail (seen);
retention's anchors and the watch's stories are read and checked in one order on both sides,
so their ``COLLATE "C"`` is not what these tests hold.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pytest
from archive_helpers import as_raw, make_chain
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.consumers.archive import (
    BatchArchiver,
    Signer,
    generate_key,
    iter_audits,
    sign_pending,
)
from sagacity.entries._events import JournalEntry
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    migrate,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres

SAGAS = ["Zeta-1", "alpha-2", "_under-3", "a-b-4", "ab-5", "é-6", "E-7", "a b-8", "B-9", "b-10"]
"""Saga ids whose en-US order is not their byte order."""


@pytest.fixture
def icu_dsn(users_pg_dsn: str) -> str:
    """A schema of its own in a database set up as users' often are (``users_postgres_dsn``:
    ICU's en-US collation, a time zone far from UTC), the archive migrated in it."""
    with psycopg.connect(users_pg_dsn, autocommit=True) as conn:
        migrate(conn)
    return users_pg_dsn


def _archived_and_signed(dsn: str, events: list[JournalEntry], key: Path) -> Signer:
    """``events`` archived at ``dsn`` and every saga's head signed with a new key at ``key``."""
    archiver = BatchArchiver(
        PostgresArchiveIngest(dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        assert archiver.archive(as_raw(events)).archived == len(events)
        signer = generate_key(key)
        with psycopg.connect(dsn) as conn:
            signed = sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        assert signed == len({e.saga_id for e in events})
    finally:
        archiver.close()
    return signer


def test_the_database_sorts_these_ids_otherwise_than_by_bytes(icu_dsn: str) -> None:
    with psycopg.connect(icu_dsn) as conn:
        (ordered,) = conn.execute(
            "SELECT array_agg(s ORDER BY s) FROM unnest(%s::text[]) AS s", (SAGAS,)
        ).fetchone()  # type: ignore[misc]
    assert ordered != sorted(SAGAS, key=str.encode)  # else this file proves nothing
    assert sorted(ordered, key=str.encode) == sorted(SAGAS, key=str.encode)


def test_every_audit_path_passes_on_an_archive_in_another_collation(
    icu_dsn: str, tmp_path: Path
) -> None:
    events = [e for n, saga in enumerate(SAGAS) for e in make_chain(saga, 3 + n % 4)]
    signer = _archived_and_signed(icu_dsn, events, tmp_path / "archive.key")
    pinned = [signer.public_raw]
    with psycopg.connect(icu_dsn) as conn:
        paths = {
            "fast": list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=pinned)),
            "bulk": list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=pinned, bulk=True)),
            "columns": list(
                iter_audits(PostgresArchiveAudits(conn), pinned_keys=pinned, bulk=False)
            ),
            "reference": list(
                iter_audits(PostgresArchiveAudits(conn), pinned_keys=pinned, reference=True)
            ),
        }
    for path, audits in paths.items():
        assert [a.saga_id for a in audits] == sorted(SAGAS, key=str.encode), path
        assert all(a.ok and a.checkpoints == 1 for a in audits), (path, audits)
    result = CliRunner().invoke(
        main,
        ["verify", "--all", "--database-url", icu_dsn, "--public-key", signer.public_hex],
    )
    assert result.exit_code == 0, result.stdout
    (ok_line,) = [line for line in result.stdout.splitlines() if line.startswith("sagas ok")]
    assert ok_line.split()[-1] == str(len(SAGAS))


def _month(offset: int) -> dt.datetime:
    """The first instant (UTC) of the month ``offset`` months from this one."""
    today = dt.datetime.now(dt.UTC)
    year, month = divmod(today.year * 12 + today.month - 1 + offset, 12)
    return dt.datetime(year, month + 1, 1, tzinfo=dt.UTC)


def _us(at: dt.datetime) -> int:
    return int(at.timestamp()) * 1_000_000


def test_retention_and_the_watch_on_an_archive_in_another_collation(
    icu_dsn: str, tmp_path: Path
) -> None:
    """Months dropped by retention leave signed anchors (read in saga order) that verify
    merges with the chains; the watch reads the signed stories in saga order too.  The
    database's time zone is far from UTC: an event at 23:30 UTC on a month's last day is in
    that month (in Chatham it is already the next), and retention drops it with its month."""
    # Months 9 and 7 before this one fall to a six-month retention; 5, 3 and 1 stay.
    mid = dt.timedelta(days=14, hours=12)
    times = [_us(_month(m) + mid) for m in (-9, -7, -5, -3, -1)]
    last_half_hour = _month(-6) - dt.timedelta(minutes=30)  # month -7's, in UTC
    edge = [times[0], _us(last_half_hour), times[3]]
    events = [e for saga in SAGAS for e in make_chain(saga, 5, times_us=times)]
    events += make_chain("tz-edge", 3, times_us=edge)
    signer = _archived_and_signed(icu_dsn, events, tmp_path / "archive.key")
    runner = CliRunner()
    dropped = runner.invoke(
        main,
        [
            "archive",
            "retention",
            "--database-url",
            icu_dsn,
            "--keep",
            "6mo",
            "--apply",
            "--export-dir",
            str(tmp_path / "export"),
            "--signing-key",
            str(tmp_path / "archive.key"),
        ],
    )
    assert dropped.exit_code == 0, (dropped.stdout, dropped.stderr)
    with psycopg.connect(icu_dsn) as conn:
        anchors: dict[str, int] = dict(
            conn.execute("SELECT saga_id, seq FROM archive_retention_anchor").fetchall()
        )
    # Every saga's first two events are gone, the edge's second with its UTC month.
    assert anchors == {**dict.fromkeys(SAGAS, 2), "tz-edge": 2}
    verified = runner.invoke(
        main, ["verify", "--all", "--database-url", icu_dsn, "--public-key", signer.public_hex]
    )
    assert verified.exit_code == 0, verified.stdout
    watched = runner.invoke(
        main,
        [
            "audit",
            "watch",
            "--once",
            "--database-url",
            icu_dsn,
            "--state",
            str(tmp_path / "auditor.jsonl"),
            "--public-key",
            signer.public_hex,
        ],
    )
    assert watched.exit_code == 0, (watched.stdout, watched.stderr)
