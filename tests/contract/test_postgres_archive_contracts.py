"""The Postgres archive's store adapters meet their ports' contracts, on a real server (a
schema per test)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from sagacity.consumers.archive._rowcheck import JOURNAL_COLUMNS
from sagacity.ports import ArchiveIngest, RetentionMonths
from sagacity.postgres.archive import PostgresArchiveIngest, PostgresRetention
from sagacity.testing.contracts import (
    ArchiveIngestContract,
    CheckpointSigningContract,
    RetentionMonthsContract,
)
from sagacity.testing.contracts._archive_ingest import Message, Refusal
from tests.contract._archive_database import ArchiveDatabase

pytestmark = [pytest.mark.postgres]


class _OnTheArchive(ArchiveDatabase):
    """The archive in the test's schema, its store and the archiver's journal row."""

    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> Iterator[None]:
        yield from self.on_database(pg_dsn)

    def create_ingest(self) -> ArchiveIngest:
        return PostgresArchiveIngest(self.dsn)

    def journal_row(
        self, saga_id: str, seq: int, hash: str, *, recorded_at_us: int, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        values = {
            "saga_id": saga_id,
            "seq": seq,
            "event_type": "TOOL_CALL_STARTED",
            "recorded_at_us": recorded_at_us,
            "hash": hash,
            "prev_hash": f"before {hash}",
            "topic": "journal.contract",
            "kafka_partition": 0,
            "kafka_offset": offset,
            "attributes": "{}",
            "commitments": "{}",
            "salts": "{}",
            "form": 1,
        }
        return JOURNAL_COLUMNS, tuple(values.get(c) for c in JOURNAL_COLUMNS)


class TestPostgresArchiveIngest(_OnTheArchive, ArchiveIngestContract):
    def quarantined(self, ingest: ArchiveIngest) -> list[Refusal]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT reason, detail, saga_id, seq, topic, kafka_partition, kafka_offset,"
                " raw_key, raw_value FROM archive_quarantine ORDER BY id"
            ).fetchall()
        return [
            Refusal(reason, detail, Message(topic, part, off, key, value), saga_id, seq)
            for reason, detail, saga_id, seq, topic, part, off, key, value in rows
        ]


class TestPostgresCheckpointSigning(_OnTheArchive, CheckpointSigningContract):
    pass


class TestPostgresRetention(_OnTheArchive, RetentionMonthsContract):
    def create_retention(self) -> RetentionMonths:
        conn = psycopg.connect(self.dsn)
        self.conns.append(conn)
        return PostgresRetention(conn)


class _OnAUsersDatabase(ArchiveDatabase):
    """The archive in a schema of a database set up as users' often are (``users_pg_dsn``:
    ICU's en-US collation, a time zone far from UTC)."""

    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> Iterator[None]:
        yield from self.on_database(users_pg_dsn)


class TestPostgresArchiveIngestOnAUsersDatabase(_OnAUsersDatabase, TestPostgresArchiveIngest):
    pass


class TestPostgresCheckpointSigningOnAUsersDatabase(
    _OnAUsersDatabase, TestPostgresCheckpointSigning
):
    pass


class TestPostgresRetentionOnAUsersDatabase(_OnAUsersDatabase, TestPostgresRetention):
    pass
