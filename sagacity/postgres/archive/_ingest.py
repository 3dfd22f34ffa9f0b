"""The archiver's store on PostgreSQL: the port :class:`~sagacity.ports.ArchiveIngest`
(:class:`PostgresArchiveIngest`), one connection (made again after a loss) and one
transaction per batch, running the SQL of :mod:`._ingestsql`.  What a batch writes is the
archive service's decision (``sagacity.consumers.archive.BatchArchiver``)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from sagacity.errors import PersistenceError
from sagacity.ports import IngestRetry, QuarantinedMessage, ReadMessage, StoredFinding
from sagacity.postgres.archive._db import connect, ensure_schema, mapped_errors
from sagacity.postgres.archive._findings import write_findings
from sagacity.postgres.archive._ingestsql import (
    archived_hashes,
    copy_quarantine,
    make_months,
    move_heads,
    read_heads,
    store_offsets,
)
from sagacity.postgres.archive._reads import PostgresArchiveReads
from sagacity.postgres.archive._rounds import PostgresRoundLog
from sagacity.postgres.archive._signing import PostgresCheckpointSigning


class _Batch:
    """One batch's transaction on ``conn`` (``made``: the months made on it)."""

    def __init__(self, conn: psycopg.Connection[Any], made: set[int]) -> None:
        self._conn = conn
        self.cur = conn.cursor()
        self._made = made
        self.events = PostgresArchiveReads(conn)
        self.round_log = PostgresRoundLog(conn)

    def read_heads(self, saga_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        return read_heads(self.cur, saga_ids)

    def archived_hashes(self, pairs: Collection[tuple[str, int]]) -> dict[tuple[str, int], str]:
        return archived_hashes(self.cur, pairs)

    def archived_hash(self, saga_id: str, seq: int) -> str | None:
        row = self.cur.execute(
            "SELECT hash FROM side_effect_journal WHERE saga_id = %s AND seq = %s",
            (saga_id, seq),
        ).fetchone()
        return row[0] if row else None

    def make_months(self, months: Mapping[int, int]) -> dict[int, str]:
        return make_months(self._conn, self.cur, months, self._made)

    def write_rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        statement = sql.SQL("COPY side_effect_journal ({}) FROM STDIN").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        )
        with self.cur.copy(statement) as copy:
            write_row = copy.write_row
            for row in rows:
                write_row(row)

    def move_heads(
        self, known: Mapping[str, tuple[int, str]], heads: Mapping[str, tuple[int, str]]
    ) -> None:
        move_heads(self.cur, known, heads)

    def quarantine(self, refusals: Sequence[QuarantinedMessage]) -> dict[str, int]:
        return copy_quarantine(self.cur, refusals)

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        write_findings(self.cur, findings)

    def store_offsets(self, group: str, batch: Sequence[ReadMessage]) -> None:
        store_offsets(self.cur, group, batch)


class PostgresArchiveIngest:
    """The archive at ``conninfo`` (its search_path picks the schema), on one connection made
    when first needed and again after :meth:`reset`."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None
        self._months: set[int] = set()

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, reconnecting if it was lost."""
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.conninfo)
            self._months.clear()
        return self._conn

    def prepare(self) -> None:
        """Migrate the archive only if it is missing or older than this release, on a
        connection of its own."""
        with connect(self.conninfo) as conn:
            ensure_schema(conn)

    @contextlib.contextmanager
    def batch(self) -> Iterator[_Batch]:
        """One batch's transaction, committed on leaving."""
        conn = self.connection()
        with mapped_errors("archive a batch"), conn.transaction():
            yield _Batch(conn, self._months)

    def offsets(self, group: str, topic: str) -> dict[int, tuple[int, int]]:
        """Per partition, the stored next offset and the signed one."""
        conn = self.connection()
        with mapped_errors("read stored offsets"), conn.transaction():
            rows = conn.execute(
                "SELECT kafka_partition, next_offset, coalesce(signed_offset, next_offset)"
                " FROM archive_consumer_offset WHERE consumer_group = %s AND topic = %s",
                (group, topic),
            ).fetchall()
        return {int(p): (int(n), int(s)) for p, n, s in rows}

    def head_findings(self) -> PostgresArchiveReads:
        """The archived heads and findings, on this connection."""
        return PostgresArchiveReads(self.connection())

    def signing(self) -> PostgresCheckpointSigning:
        """The signing rounds, on this connection."""
        return PostgresCheckpointSigning(self.connection())

    def retry_of(self, exc: BaseException) -> IngestRetry | None:
        """``MONTH_DROPPED`` for "no partition for row" (retention dropped a month this
        connection had made), ``ROW_CONFLICT`` for a row another archiver wrote first."""
        if not isinstance(exc, PersistenceError):
            return None
        if isinstance(exc.__cause__, psycopg.errors.CheckViolation):
            return IngestRetry.MONTH_DROPPED
        if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
            return IngestRetry.ROW_CONFLICT
        return None

    def reset(self) -> None:
        """Close and forget the connection, and the months made on it."""
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None
        self._months.clear()

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
