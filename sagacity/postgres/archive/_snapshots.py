"""Reading an audit's snapshot on a second connection (docs/adr/0017-audit-coverage.md).

``verify`` holds one REPEATABLE READ snapshot; what it streams in bulk (the rows by binary
``COPY``, which the chains are walked and the stories read on) is read on a further connection
that imports that snapshot, so the server works on it while the audit's own connection reads
the rest, and every reader sees the same rows whatever is committed meanwhile.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from sagacity.errors import PersistenceError
from sagacity.postgres.archive._db import connect


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
