"""Reading an audit's snapshot on a second connection (docs/adr/0017-audit-coverage.md).

``verify`` holds one REPEATABLE READ snapshot; what it streams in bulk (the rows by binary
``COPY``, every saga's story) is read on further connections that import that snapshot, so the
server works on them while the audit's own connection reads the rest, and every reader sees
the same rows whatever is committed meanwhile.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from sagacity.consumers.archive._db import connect
from sagacity.errors import PersistenceError


def shared_snapshot(conn: psycopg.Connection) -> tuple[str, str | None, str, str]:
    """What a second connection needs to read ``conn``'s snapshot: ``conn``'s conninfo and
    password, its exported snapshot and its search path."""
    # Not in a savepoint: PostgreSQL exports only a top-level transaction's snapshot.
    shared = conn.execute("SELECT pg_export_snapshot(), current_setting('search_path')").fetchone()
    assert shared is not None
    return conn.info.dsn, conn.info.password or None, str(shared[0]), str(shared[1])


def reader_of(
    dsn: str, password: str | None, snapshot: str, search_path: str
) -> psycopg.Connection | None:
    """A second connection reading a snapshot, from :func:`shared_snapshot`."""
    try:
        reader = connect(make_conninfo(dsn, password=password) if password else dsn)
    except PersistenceError:
        return None
    try:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        reader.execute("SELECT set_config('search_path', %s, true)", (search_path,))
    except BaseException:
        reader.close()
        raise
    return reader


class Prefetched:
    """The rows of a query on a second connection reading ``conn``'s snapshot
    (:func:`reader_of`), fetched ``fetch`` at a time by a thread of its own into a
    bounded queue: the server runs the query, and the rows travel, while the caller works on
    what came before (psycopg releases the GIL while it waits).

    :meth:`connected` says whether the second connection could be made (if not, the caller
    reads the query on ``conn``); then iterate the rows once.  :meth:`close` stops the thread
    and closes the connection.
    """

    _DONE = object()

    def __init__(
        self, conn: psycopg.Connection, query: str, params: Mapping[str, Any], *, fetch: int
    ) -> None:
        shared = shared_snapshot(conn)
        self._batches: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._connected = False
        self._thread = threading.Thread(
            target=self._run, args=(shared, query, params, fetch), name="sagacity-audit-story"
        )
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._batches.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(
        self,
        shared: tuple[str, str | None, str, str],
        query: str,
        params: Mapping[str, Any],
        fetch: int,
    ) -> None:
        try:
            reader = reader_of(*shared)
            self._connected = reader is not None
            self._ready.set()
            if reader is None:
                return
            with reader, reader.cursor(name="sgc_audit_story") as cursor:
                cursor.execute(query, params)
                while rows := cursor.fetchmany(fetch):
                    if not self._put(rows):
                        return
            self._put(self._DONE)
        except BaseException as exc:  # raised to the caller by __iter__ (or connected())
            self._ready.set()
            self._put(exc)

    def connected(self) -> bool:
        """Whether the rows are read on a second connection (waits until it is made).

        Raises:
            PersistenceError: the database failed opening it.
        """
        self._ready.wait()
        if not self._connected and not self._batches.empty():
            item = self._batches.get()
            if isinstance(item, BaseException):
                raise item
        return self._connected

    def __iter__(self) -> Iterator[Sequence[Any]]:
        while True:
            item = self._batches.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item

    def close(self) -> None:
        """Stop the thread (the rest is not read) and close its connection."""
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._batches.get(timeout=0.05)
        self._thread.join()
