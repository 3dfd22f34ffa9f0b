"""One saga's evidence as an audit bundle exports it, on PostgreSQL: the port
:class:`~sagacity.ports.SagaBundleReads` (:class:`PostgresSagaBundles`).  The bundle itself
(the manifest, the proofs, its verdict) is the archive service's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from sagacity.postgres._archive_schema import FORMS_VERSION, LOG_VERSION, checkpoint_round_columns
from sagacity.postgres.archive._audits import PostgresArchiveAudits
from sagacity.postgres.archive._db import check_schema, mapped_errors
from sagacity.postgres.archive._reads import RECORD_COLUMNS
from sagacity.postgres.archive._rounds import PostgresRoundLog


class _Bundle:
    """One saga's evidence in the snapshot transaction on ``conn``."""

    def __init__(self, conn: psycopg.Connection[Any], saga_id: str, version: int) -> None:
        self._conn = conn
        self._saga_id = saga_id
        self._version = version
        self.round_log = PostgresRoundLog(conn)

    def rows(self) -> list[tuple[Any, ...]]:
        forms = ", form, commitments, salts" if self._version >= FORMS_VERSION else ""
        return self._conn.execute(
            "SELECT saga_id, seq, event_type, tool, payload, result, error, actor, attributes,"  # noqa: S608
            f" recorded_at_us, prev_hash, hash{forms} FROM side_effect_journal"
            " WHERE saga_id = %s ORDER BY archive_id",
            (self._saga_id,),
        ).fetchall()

    def checkpoints(self) -> list[tuple[Any, ...]]:
        round_columns = checkpoint_round_columns(self._version)
        return self._conn.execute(
            f"SELECT seq, hash, signed_at_us, key_id, signature, {round_columns}"  # noqa: S608
            " FROM archive_checkpoint WHERE saga_id = %s ORDER BY seq, signed_at_us",
            (self._saga_id,),
        ).fetchall()

    def last_anchor(self) -> tuple[int, str, str | None, int | None] | None:
        if self._version < LOG_VERSION:
            row = self._conn.execute(
                "SELECT seq, hash FROM archive_retention_anchor WHERE saga_id = %s"
                " ORDER BY seq DESC LIMIT 1",
                (self._saga_id,),
            ).fetchone()
            return None if row is None else (row[0], row[1], None, None)
        row = self._conn.execute(
            "SELECT seq, hash, partition_name, leaf_index FROM archive_retention_anchor"
            " WHERE saga_id = %s ORDER BY seq DESC LIMIT 1",
            (self._saga_id,),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def retention_record(self, partition_name: str) -> tuple[Any, ...] | None:
        return self._conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM archive_retention WHERE partition_name = %s",  # noqa: S608
            (partition_name,),
        ).fetchone()

    def anchors_of(self, partition_name: str) -> list[tuple[str, int, str]]:
        rows = self._conn.execute(
            "SELECT saga_id, seq, hash FROM archive_retention_anchor WHERE partition_name = %s"
            " ORDER BY leaf_index",
            (partition_name,),
        ).fetchall()
        return [(str(s), int(n), str(h)) for s, n, h in rows]


class PostgresSagaBundles(PostgresArchiveAudits):
    """The archive on ``conn`` (the caller's connection, which it closes), as a bundle's
    export and its audit read it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(conn)
        self._bundle_conn = conn

    @contextmanager
    def bundle_snapshot(self, saga_id: str) -> Iterator[_Bundle]:
        """One snapshot (REPEATABLE READ, read only) of the saga's evidence."""
        conn = self._bundle_conn
        version = check_schema(conn)
        if not conn.autocommit:
            conn.rollback()  # the snapshot transaction below must be the first statement's
        with mapped_errors("export a saga"), conn.transaction():
            # One snapshot: rows, checkpoints, rounds and anchor of the same moment (a round
            # signed between two reads would show a checkpoint past the exported head).
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _Bundle(conn, saga_id, version)
