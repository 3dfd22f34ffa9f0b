"""The Postgres archive's reads meet their ports' contracts, on a real server (a schema per
test), the archive written by the archiver's own rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from sagacity.consumers.archive._rowcheck import JOURNAL_COLUMNS, _journal_row
from sagacity.entries._events import JournalEntry
from sagacity.ports import ArchiveIngest
from sagacity.postgres.archive import PostgresArchiveIngest, PostgresArchiveReads
from sagacity.testing.contracts import ArchiveReadsContract
from sagacity.testing.contracts._archive_reads import ArchiveReads
from tests.contract._archive_database import ArchiveDatabase

pytestmark = [pytest.mark.postgres]


class TestPostgresArchiveReads(ArchiveDatabase, ArchiveReadsContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> Iterator[None]:
        yield from self.on_database(pg_dsn)

    def create_ingest(self) -> ArchiveIngest:
        return PostgresArchiveIngest(self.dsn)

    def entry_row(
        self, entry: JournalEntry, *, topic: str, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        return JOURNAL_COLUMNS, _journal_row(entry, topic, 0, offset)

    def create_reads(self) -> ArchiveReads:
        # In autocommit: a read holds no lock the archiver's next batch waits on.
        conn = psycopg.connect(self.dsn, autocommit=True)
        self.conns.append(conn)
        return PostgresArchiveReads(conn)


class TestPostgresArchiveReadsOnAUsersDatabase(TestPostgresArchiveReads):
    """The same, in a database set up as users' often are (``users_pg_dsn``: ICU's en-US
    collation, a time zone far from UTC)."""

    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> Iterator[None]:
        yield from self.on_database(users_pg_dsn)
