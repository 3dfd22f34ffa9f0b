"""The archive's expired months on PostgreSQL, as retention handles them: the port
:class:`~sagacity.ports.RetentionMonths` (:class:`PostgresRetention`).

A month is a partition of ``side_effect_journal``; it is exported by a server-side cursor,
its anchors (each saga's last row) are selected and kept beside its record, and it leaves the
archive only as a whole table dropped by its owner.  What the record signs is the archive
service's (``sagacity.consumers.archive``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from sagacity.ports import ArchiveMonth, SignedRecordFields, UnsignedMonth
from sagacity.postgres.archive._db import check_schema, current_schema, mapped_errors

_BOUND = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")
_FETCH = 5_000


def _register_key(conn: psycopg.Connection[Any], key_id: str, public_hex: str) -> None:
    conn.execute(
        "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)"
        " ON CONFLICT (key_id) DO NOTHING",
        (key_id, public_hex),
    )


def _partitions(conn: psycopg.Connection[Any]) -> list[ArchiveMonth]:
    with mapped_errors("list partitions"):
        found = conn.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'side_effect_journal'::regclass"
        ).fetchall()
    out = []
    for name, bound in found:
        match = _BOUND.search(bound or "")
        if match:
            out.append(
                ArchiveMonth(
                    name=name, range_from_us=int(match.group(1)), range_to_us=int(match.group(2))
                )
            )
    return sorted(out, key=lambda p: p.range_from_us)


class _Dropping:
    """One month's export-and-drop transaction on ``conn``."""

    def __init__(self, conn: psycopg.Connection[Any], month: ArchiveMonth, table: sql.Composable):
        self._conn = conn
        self._month = month
        self._table = table
        self._anchors = sql.SQL(
            'SELECT DISTINCT ON (saga_id COLLATE "C") saga_id, seq, hash FROM {}'
            ' ORDER BY saga_id COLLATE "C", seq DESC'
        ).format(table)

    @contextmanager
    def export_lines(self) -> Iterator[Iterator[str]]:
        with self._conn.cursor(name="sgc_retention") as cur:
            cur.itersize = _FETCH
            cur.execute(
                sql.SQL(
                    # Saga id byte order whatever the database's collation: the port's
                    # promise, and one export for one month on every archive.
                    'SELECT row_to_json(t)::text FROM {} t ORDER BY saga_id COLLATE "C", archive_id'
                ).format(self._table)
            )
            yield (str(line) for (line,) in cur)

    @contextmanager
    def anchors(self) -> Iterator[Iterator[tuple[str, int, str]]]:
        with self._conn.cursor(name="sgc_retention_anchors") as cur:
            cur.itersize = _FETCH
            cur.execute(self._anchors)
            yield ((str(s), int(n), str(h)) for s, n, h in cur)

    def register_key(self, key_id: str, public_hex: str) -> None:
        _register_key(self._conn, key_id, public_hex)

    def store_record(self, record: SignedRecordFields, *, export_file: str) -> None:
        part = self._month
        self._conn.execute(
            "INSERT INTO archive_retention (partition_name, range_from_us, range_to_us,"
            " row_count, export_file, export_sha256, anchor_count, anchors_root,"
            " signed_at_us, key_id, signature)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                part.name,
                part.range_from_us,
                part.range_to_us,
                record.row_count,
                export_file,
                record.export_sha256,
                record.anchor_count,
                record.anchors_root,
                record.signed_at_us,
                record.key_id,
                record.signature,
            ),
        )
        self._conn.execute(
            sql.SQL(
                "INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name,"
                " leaf_index) SELECT saga_id, seq, hash, {},"
                ' row_number() OVER (ORDER BY saga_id COLLATE "C") - 1 FROM ({}) a'
            ).format(sql.Literal(part.name), self._anchors)
        )

    def drop(self) -> None:
        # DDL, not a row change: the append-only row and TRUNCATE triggers do not apply,
        # and only the table's owner may do it.
        self._conn.execute(sql.SQL("DROP TABLE {}").format(self._table))


class _Signing:
    """The signing of the unsigned records, in one transaction on ``conn``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def unsigned_months(self) -> list[UnsignedMonth]:
        rows = self._conn.execute(
            "SELECT partition_name, range_from_us, range_to_us, row_count, export_sha256"
            " FROM archive_retention WHERE signature IS NULL ORDER BY partition_name"
        ).fetchall()
        return [
            UnsignedMonth(
                name=name,
                range_from_us=int(range_from),
                range_to_us=int(range_to),
                row_count=int(row_count),
                export_sha256=sha256,
            )
            for name, range_from, range_to, row_count, sha256 in rows
        ]

    def register_key(self, key_id: str, public_hex: str) -> None:
        _register_key(self._conn, key_id, public_hex)

    def leaf_ordered_anchors(self, month: str) -> list[tuple[str, int, str]]:
        self._conn.execute(
            "UPDATE archive_retention_anchor a SET leaf_index = o.n FROM (SELECT saga_id,"
            ' seq, row_number() OVER (ORDER BY saga_id COLLATE "C", seq) - 1 AS n'
            " FROM archive_retention_anchor WHERE partition_name = %s) o"
            " WHERE a.saga_id = o.saga_id AND a.seq = o.seq",
            (month,),
        )
        rows = self._conn.execute(
            "SELECT saga_id, seq, hash FROM archive_retention_anchor"
            " WHERE partition_name = %s ORDER BY leaf_index",
            (month,),
        ).fetchall()
        return [(str(s), int(n), str(h)) for s, n, h in rows]

    def store_signature(self, record: SignedRecordFields) -> None:
        self._conn.execute(
            "UPDATE archive_retention SET anchor_count = %s, anchors_root = %s,"
            " signed_at_us = %s, key_id = %s, signature = %s WHERE partition_name = %s",
            (
                record.anchor_count,
                record.anchors_root,
                record.signed_at_us,
                record.key_id,
                record.signature,
                record.partition_name,
            ),
        )


class PostgresRetention:
    """The archive's months on ``conn`` (the caller's connection, which it closes)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._schema: str | None = None

    def months(self) -> list[ArchiveMonth]:
        """The journal's months, oldest first."""
        conn = self._conn
        # In a transaction of its own, so that each month's below is a real one (committed by
        # itself), not a savepoint of an implicit transaction these reads would have opened.
        with mapped_errors("list expired months"), conn.transaction():
            check_schema(conn)
            self._schema = current_schema(conn)
            return _partitions(conn)

    def _table(self, month: ArchiveMonth) -> sql.Composable:
        if self._schema is None:
            with mapped_errors("list expired months"), self._conn.transaction():
                self._schema = current_schema(self._conn)
        return sql.Identifier(self._schema, month.name)

    def row_count(self, month: ArchiveMonth) -> int:
        """How many rows ``month`` holds."""
        table = self._table(month)
        with mapped_errors("count an expired month"), self._conn.transaction():
            row = self._conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def dropping(self, month: ArchiveMonth) -> Iterator[_Dropping]:
        """A transaction with ``month`` locked, committed on leaving."""
        table = self._table(month)
        with mapped_errors("export and drop an expired month"), self._conn.transaction():
            self._conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
            yield _Dropping(self._conn, month, table)

    @contextmanager
    def signing(self) -> Iterator[_Signing]:
        """A transaction signing the unsigned records, committed on leaving."""
        with mapped_errors("sign retention records"), self._conn.transaction():
            check_schema(self._conn)
            yield _Signing(self._conn)
