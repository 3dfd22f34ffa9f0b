"""The archive as an audit reads it, on PostgreSQL: the port
:class:`~sagacity.ports.ArchiveAudits` (:class:`PostgresArchiveAudits`).

One REPEATABLE READ, read-only transaction is the audit's snapshot; the four streams by saga
id are server-side cursors in it, and the rows go by binary ``COPY`` on a second connection
importing that snapshot (:class:`RowStream`).  What the rows say is judged by the archive
service (``sagacity.consumers.archive``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import psycopg

from sagacity.ports import ArchiveSchema
from sagacity.postgres._archive_schema import (
    FORMS_VERSION,
    LOG_VERSION,
    ROUNDS_VERSION,
    checkpoint_round_columns,
)
from sagacity.postgres._rows import FORM_COLUMNS, ROW_COLUMNS
from sagacity.postgres.archive._chainstream import chain_rows, decoded_rows
from sagacity.postgres.archive._db import check_schema, mapped_errors
from sagacity.postgres.archive._reads import PostgresArchiveReads
from sagacity.postgres.archive._rounds import PostgresRoundLog
from sagacity.postgres.archive._snapshots import reader_of, shared_snapshot
from sagacity.postgres.archive._stories import story_query


def audit_queries(saga_id: str | None, version: int) -> tuple[str, str, str, str]:
    """The four streams by saga id: rows, checkpoints, retention anchors, heads."""
    where = "WHERE saga_id = %(s)s" if saga_id is not None else ""
    order = 'ORDER BY saga_id COLLATE "C"'
    columns = ROW_COLUMNS + (FORM_COLUMNS if version >= FORMS_VERSION else "")
    round_columns = checkpoint_round_columns(version)
    # Only constant fragments are interpolated; the saga id is a bound parameter.
    return (
        f"SELECT {columns} FROM side_effect_journal {where} {order}, archive_id",  # noqa: S608
        "SELECT saga_id, seq, hash, signed_at_us, key_id, signature,"  # noqa: S608
        f" {round_columns} FROM archive_checkpoint {where} {order}",
        f"SELECT saga_id, max(seq), (array_agg(hash ORDER BY seq DESC))[1],"  # noqa: S608
        " (array_agg(partition_name ORDER BY seq DESC))[1]"
        f" FROM archive_retention_anchor {where} GROUP BY saga_id {order}",
        f"SELECT saga_id, head_seq, head_hash FROM archive_saga_head {where} {order}",  # noqa: S608
    )


class RowStream:
    """Every saga's rows by binary ``COPY`` (:func:`chain_rows`) on a second connection reading
    ``conn``'s snapshot, opened and started in a thread of its own: the connection is made, and
    the server sorts the rows and sends the first of them, while the caller reads other things
    on ``conn`` (psycopg and ``select`` release the GIL while they wait).

    :meth:`connected` says whether the second connection could be made (if not, the caller
    reads the rows on ``conn``); then iterate the blocks once.  :meth:`close` waits for the
    thread, then closes the stream (read or not) and the connection.
    """

    def __init__(self, conn: psycopg.Connection[Any], *, forms: bool = False) -> None:
        shared = shared_snapshot(conn)
        self._forms = forms
        self._reader: psycopg.Connection[Any] | None = None
        self._blocks: Generator[bytes] | None = None
        self._first: bytes | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._start, args=shared, name="sagacity-audit-stream"
        )
        self._thread.start()

    def _start(self, dsn: str, password: str | None, snapshot: str, search_path: str) -> None:
        try:
            self._reader = reader_of(dsn, password, snapshot, search_path)
            if self._reader is not None:
                self._blocks = chain_rows(self._reader, forms_only_first=self._forms)
                self._first = next(self._blocks, None)
        except BaseException as exc:  # raised to the caller by connected()
            self._error = exc

    def connected(self) -> bool:
        """Whether the rows are streamed on a second connection (waits for the first block).

        Raises:
            PersistenceError: the database failed opening or starting the stream.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._reader is not None

    def __iter__(self) -> Iterator[bytes]:
        if not self.connected() or self._blocks is None:
            raise RuntimeError("no second connection: the rows are read on the audit's")
        if self._first is not None:
            yield self._first
        yield from self._blocks

    def close(self) -> None:
        """Wait for the thread; then close the stream and the second connection."""
        self._thread.join()
        try:
            if self._blocks is not None:
                self._blocks.close()
        finally:
            if self._reader is not None:
                self._reader.close()


class _Snapshot:
    """One audit's snapshot transaction on ``conn``; its cursors and streams are closed by
    ``closing`` (the last opened first)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        closing: contextlib.ExitStack,
        *,
        saga_id: str | None,
        fetch: int,
        version: int,
    ) -> None:
        self._conn = conn
        self._closing = closing
        self._saga_id = saga_id
        self._fetch = fetch
        self._forms = version >= FORMS_VERSION
        self._queries = audit_queries(saga_id, version)
        self.round_log = self.round_streams = PostgresRoundLog(conn)
        self.saga_rows = self.retention = PostgresArchiveReads(conn)

    def chain_blocks(self) -> RowStream:
        return self._closing.enter_context(
            contextlib.closing(RowStream(self._conn, forms=self._forms))
        )

    def decoded(self, blocks: Iterable[bytes]) -> Iterator[tuple[Any, ...]]:
        return iter(decoded_rows(blocks))

    def batches(self, stream: int) -> psycopg.ServerCursor[Any]:
        cur = self._closing.enter_context(self._conn.cursor(name=f"sgc_audit_{stream}"))
        cur.itersize = self._fetch
        cur.execute(self._queries[stream], {"s": self._saga_id})
        return cur

    def anchor_rows(self) -> list[tuple[Any, ...]]:
        return self._conn.execute(self._queries[2], {"s": self._saga_id}).fetchall()

    def story_rows(self, saga_id: str) -> list[tuple[Any, ...]]:
        query = story_query(where="WHERE j.saga_id = %(s)s", forms=self._forms)
        return self._conn.execute(query, {"s": saga_id}).fetchall()


class PostgresArchiveAudits:
    """The archive on ``conn`` (the caller's connection, which it closes), as an audit reads
    it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def schema(self) -> ArchiveSchema:
        """What the archive's schema holds, from its version."""
        version = check_schema(self._conn)
        return ArchiveSchema(
            version=version,
            forms=version >= FORMS_VERSION,
            rounds=version >= ROUNDS_VERSION,
            signed_records=version >= LOG_VERSION,
        )

    def signing_keys(self) -> list[tuple[str, str]]:
        """``(key_id, public key hex)`` of every recorded signing key."""
        with mapped_errors("read signing keys"):
            rows = self._conn.execute("SELECT key_id, public_key FROM archive_signing_key")
            return [(str(k), str(p)) for k, p in rows.fetchall()]

    @contextlib.contextmanager
    def audit_snapshot(
        self, *, saga_id: str | None, fetch: int, version: int
    ) -> Iterator[_Snapshot]:
        """A read-only snapshot transaction, its streams closed on leaving."""
        conn = self._conn
        if not conn.autocommit:
            conn.rollback()  # the snapshot transaction below must be the first statement's
        with (
            mapped_errors("audit the archive"),
            conn.transaction(),
            contextlib.ExitStack() as closing,
        ):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _Snapshot(conn, closing, saga_id=saga_id, fetch=fetch, version=version)
