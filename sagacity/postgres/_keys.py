"""The data keys' store on PostgreSQL (:class:`~sagacity.ports.KeyStore`): one row per saga,
the key wrapped by a KEK kept outside.

Table ``sagacity_data_keys`` (its migrations run by the one runner, :mod:`._migrate`, recorded
in ``sagacity_keys_schema_version``)::

    saga_id     text PRIMARY KEY
    kek_id      text         the KEK the key is wrapped under; NULL once erased
    wrapped     bytea        the wrapped data key; NULL once erased
    created_at  timestamptz
    rewrapped_at timestamptz the last rotation that rewrapped it
    erased_at / erased_by / reason   the erasure, once the key is destroyed

An erased saga keeps its row (without the key): it records the erasure, and it stops a late
writer from creating a fresh key for the saga.  Errors are mapped by :mod:`._errors`.  See
docs/adr/0019-erasure.md.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from sagacity.ports import StoredKey
from sagacity.postgres._connect import connect
from sagacity.postgres._errors import mapped_errors
from sagacity.postgres._migrate import migrate

TABLE = "sagacity_data_keys"

COMPONENT = "sagacity_keys"
"""The key store's migrations are recorded in ``sagacity_keys_schema_version``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    saga_id       text        PRIMARY KEY,
    kek_id        text,
    wrapped       bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    rewrapped_at  timestamptz,
    erased_at     timestamptz,
    erased_by     text,
    reason        text,
    CHECK ((erased_at IS NULL) = (wrapped IS NOT NULL AND kek_id IS NOT NULL))
)
"""
_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (kek_id) WHERE kek_id IS NOT NULL"

_COLUMNS = "saga_id, kek_id, wrapped, erased_at, erased_by, reason"

_Row = tuple[Any, ...]
_SELECT = "SELECT {columns} FROM {table} WHERE saga_id = %s"


def _q(text: str) -> sql.Composed:
    return sql.SQL(text).format(
        table=sql.Identifier(TABLE),
        index=sql.Identifier(f"{TABLE}_kek_id"),
        columns=sql.SQL(_COLUMNS),
    )


def _row(found: _Row) -> StoredKey:
    saga_id, kek_id, wrapped, erased_at, erased_by, reason = found
    assert wrapped is None or isinstance(wrapped, bytes)
    assert erased_at is None or isinstance(erased_at, datetime)
    return StoredKey(
        saga_id=str(saga_id),
        kek_id=None if kek_id is None else str(kek_id),
        wrapped=wrapped,
        erased_at=erased_at,
        erased_by=None if erased_by is None else str(erased_by),
        reason=None if reason is None else str(reason),
    )


def _migrations() -> tuple[tuple[int, str], ...]:
    return ((1, f"{_q(_SCHEMA).as_string()};\n{_q(_INDEX).as_string()}"),)


class PostgresKeyStore:
    """:class:`~sagacity.ports.KeyStore` on one Postgres database; a connection per thread.

    Every psycopg error leaves as a :class:`~sagacity.errors.PersistenceError` saying what
    failed (:func:`~sagacity.postgres.mapped_errors`), retryable
    (:class:`~sagacity.errors.PersistenceUnavailableError`) after a lost connection: the next
    call reconnects.

    Args:
        conninfo: libpq URL or conninfo (its ``search_path`` picks the schema).
    """

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._all_lock = threading.Lock()

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self._conninfo, autocommit=True, action="key store: connect")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def connect(self) -> None:
        """Open this thread's connection now (a start-up's reachability check).

        Raises:
            PersistenceError: the database could not be reached.
        """
        self._conn()

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

    def ensure_schema(self) -> None:
        """Apply the store's migrations not yet applied (the one runner: instances starting
        together apply each once; a schema up to date is only read)."""
        migrate(self._conn(), COMPONENT, _migrations())

    def exists(self) -> bool:
        """Whether the table is there (on the connection's search path); creates nothing.

        Raises:
            PersistenceError: the database could not be reached.
        """
        with mapped_errors("key store: looking for the data keys table"):
            found = self._conn().execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,)).fetchone()
        return bool(found and found[0])

    def _one(self, action: str, query: str, params: tuple[object, ...]) -> _Row | None:
        with mapped_errors(f"key store: {action}"):
            found: _Row | None = self._conn().execute(_q(query), params).fetchone()
        return found

    def load(self, saga_id: str) -> StoredKey | None:
        """The saga's row, or ``None``."""
        found = self._one("reading a data key", _SELECT, (saga_id,))
        return None if found is None else _row(found)

    def create(self, saga_id: str, *, kek_id: str, wrapped: bytes) -> StoredKey:
        """Insert the saga's first key, or return the row a concurrent creator (or an erasure)
        left there."""
        found = self._one(
            "creating a data key",
            "INSERT INTO {table} (saga_id, kek_id, wrapped) VALUES (%s, %s, %s) "
            "ON CONFLICT (saga_id) DO NOTHING RETURNING {columns}",
            (saga_id, kek_id, wrapped),
        )
        if found is None:
            found = self._one("creating a data key", _SELECT, (saga_id,))
        assert found is not None  # rows are never deleted
        return _row(found)

    def destroy(self, saga_id: str, *, actor: str, reason: str) -> tuple[StoredKey, bool, bool]:
        """Erase the saga's key; concurrent calls serialise on the row and erase once."""
        conn = self._conn()
        with mapped_errors("key store: destroying a data key"), conn.transaction():
            # A saga with no key yet gets a marker row first, so both paths lock a row.
            marked = conn.execute(
                _q(
                    "INSERT INTO {table} (saga_id, erased_at, erased_by, reason) "
                    "VALUES (%s, now(), %s, %s) ON CONFLICT (saga_id) DO NOTHING "
                    "RETURNING {columns}"
                ),
                (saga_id, actor, reason),
            ).fetchone()
            if marked is not None:
                return _row(marked), True, False
            erased = conn.execute(
                _q(
                    "UPDATE {table} SET kek_id = NULL, wrapped = NULL, erased_at = now(), "
                    "erased_by = %s, reason = %s WHERE saga_id = %s AND erased_at IS NULL "
                    "RETURNING {columns}"
                ),
                (actor, reason, saga_id),
            ).fetchone()
            if erased is not None:
                return _row(erased), True, True
            found = conn.execute(_q(_SELECT), (saga_id,)).fetchone()
        assert found is not None
        return _row(found), False, True

    def pending_rewrap(
        self, *, kek_ids: tuple[str, ...], after: str, limit: int
    ) -> list[StoredKey]:
        """Live keys under one of ``kek_ids``, by saga id after ``after``."""
        with mapped_errors("key store: listing data keys to rewrap"):
            rows = (
                self._conn()
                .execute(
                    _q(
                        "SELECT {columns} FROM {table} WHERE kek_id = ANY(%s) "
                        "AND saga_id > %s ORDER BY saga_id LIMIT %s"
                    ),
                    (list(kek_ids), after, limit),
                )
                .fetchall()
            )
        return [_row(r) for r in rows]

    def rewrap(
        self, saga_id: str, *, old_kek_id: str, old_wrapped: bytes, kek_id: str, wrapped: bytes
    ) -> bool:
        """Replace the wrapped key if unchanged since it was read."""
        with mapped_errors("key store: rewrapping a data key"):
            done = self._conn().execute(
                _q(
                    "UPDATE {table} SET kek_id = %s, wrapped = %s, rewrapped_at = now() "
                    "WHERE saga_id = %s AND kek_id = %s AND wrapped = %s"
                ),
                (kek_id, wrapped, saga_id, old_kek_id, old_wrapped),
            )
        return done.rowcount == 1

    def kek_ids(self) -> set[str]:
        """The KEKs live keys are wrapped under: a skip scan of the ``kek_id`` index, one
        probe per distinct id, however many keys there are."""
        with mapped_errors("key store: listing key-encryption key ids"):
            rows = (
                self._conn()
                .execute(
                    _q(
                        "WITH RECURSIVE k(id) AS ("
                        " (SELECT kek_id FROM {table} WHERE kek_id IS NOT NULL"
                        "  ORDER BY kek_id LIMIT 1)"
                        " UNION ALL"
                        " SELECT (SELECT kek_id FROM {table} WHERE kek_id > k.id"
                        "  ORDER BY kek_id LIMIT 1) FROM k WHERE k.id IS NOT NULL"
                        ") SELECT id FROM k WHERE id IS NOT NULL"
                    )
                )
                .fetchall()
            )
        return {str(kek_id) for (kek_id,) in rows}

    def count_by_kek(self) -> dict[str, int]:
        """How many live keys each KEK wraps."""
        with mapped_errors("key store: counting data keys"):
            rows = (
                self._conn()
                .execute(
                    _q("SELECT kek_id, count(*) FROM {table} WHERE kek_id IS NOT NULL GROUP BY 1")
                )
                .fetchall()
            )
        return {str(kek_id): int(n) for kek_id, n in rows}
