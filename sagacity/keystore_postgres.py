"""The data keys' store on PostgreSQL: one row per saga, the key wrapped by a KEK kept outside.

Table ``sagacity_data_keys`` (created under an advisory lock, so instances starting together
do not race on the catalog)::

    saga_id     text PRIMARY KEY
    kek_id      text         the KEK the key is wrapped under; NULL once erased
    wrapped     bytea        the wrapped data key; NULL once erased
    created_at  timestamptz
    rewrapped_at timestamptz the last rotation that rewrapped it
    erased_at / erased_by / reason   the erasure, once the key is destroyed

An erased saga keeps its row (without the key): it records the erasure, and it stops a late
writer from creating a fresh key for the saga.  See docs/adr/0019-erasure.md.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from datetime import datetime

import psycopg
from psycopg import sql

from sagacity._envelope import KEK_SETTING, KeyRing
from sagacity._keys import KeyService, StoredKey
from sagacity.errors import PersistenceError, PersistenceUnavailableError

TABLE = "sagacity_data_keys"

log = logging.getLogger("sagacity.keys")

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

# The advisory-lock namespace of the key store (first key of the two-int form).
_LOCK_SPACE = 0x5A6B
_COLUMNS = "saga_id, kek_id, wrapped, erased_at, erased_by, reason"

_Row = tuple[object, ...]


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


def _mapped(action: str, exc: psycopg.Error) -> PersistenceError:
    kind = (
        PersistenceUnavailableError
        if isinstance(exc, psycopg.OperationalError)
        else PersistenceError
    )
    error = kind(f"key store: {action} failed: {exc}")
    error.__cause__ = exc
    return error


class PostgresKeyStore:
    """:class:`~sagacity._keys.KeyStore` on one Postgres database; a connection per thread.

    Args:
        conninfo: libpq URL or conninfo (its ``search_path`` picks the schema).
    """

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._local = threading.local()
        self._all: list[psycopg.Connection[_Row]] = []
        self._all_lock = threading.Lock()

    def _conn(self) -> psycopg.Connection[_Row]:
        conn: psycopg.Connection[_Row] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            try:
                conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
            except psycopg.Error as exc:
                raise _mapped("connect", exc) from exc
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
        """Create the table if missing; instances starting at once serialise on a lock."""
        try:
            conn = self._conn()
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_SPACE, TABLE))
                conn.execute(_q(_SCHEMA))
                conn.execute(_q(_INDEX))
        except psycopg.Error as exc:
            raise _mapped("creating the data keys table", exc) from exc

    def exists(self) -> bool:
        """Whether the table is there (on the connection's search path); creates nothing.

        Raises:
            PersistenceError: the database could not be reached.
        """
        try:
            found = self._conn().execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,)).fetchone()
        except psycopg.Error as exc:
            raise _mapped("looking for the data keys table", exc) from exc
        return bool(found and found[0])

    def load(self, saga_id: str) -> StoredKey | None:
        """The saga's row, or ``None``."""
        try:
            found = (
                self._conn()
                .execute(_q("SELECT {columns} FROM {table} WHERE saga_id = %s"), (saga_id,))
                .fetchone()
            )
        except psycopg.Error as exc:
            raise _mapped("reading a data key", exc) from exc
        return None if found is None else _row(found)

    def create(self, saga_id: str, *, kek_id: str, wrapped: bytes) -> StoredKey:
        """Insert the saga's first key, or return the row a concurrent creator (or an erasure)
        left there."""
        try:
            conn = self._conn()
            found = conn.execute(
                _q(
                    "INSERT INTO {table} (saga_id, kek_id, wrapped) VALUES (%s, %s, %s) "
                    "ON CONFLICT (saga_id) DO NOTHING RETURNING {columns}"
                ),
                (saga_id, kek_id, wrapped),
            ).fetchone()
            if found is None:
                found = conn.execute(
                    _q("SELECT {columns} FROM {table} WHERE saga_id = %s"), (saga_id,)
                ).fetchone()
        except psycopg.Error as exc:
            raise _mapped("creating a data key", exc) from exc
        assert found is not None  # rows are never deleted
        return _row(found)

    def destroy(self, saga_id: str, *, actor: str, reason: str) -> tuple[StoredKey, bool, bool]:
        """Erase the saga's key; concurrent calls serialise on the row and erase once."""
        try:
            conn = self._conn()
            with conn.transaction():
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
                found = conn.execute(
                    _q("SELECT {columns} FROM {table} WHERE saga_id = %s"), (saga_id,)
                ).fetchone()
        except psycopg.Error as exc:
            raise _mapped("destroying a data key", exc) from exc
        assert found is not None
        return _row(found), False, True

    def pending_rewrap(
        self, *, kek_ids: tuple[str, ...], after: str, limit: int
    ) -> list[StoredKey]:
        """Live keys under one of ``kek_ids``, by saga id after ``after``."""
        try:
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
        except psycopg.Error as exc:
            raise _mapped("listing data keys to rewrap", exc) from exc
        return [_row(r) for r in rows]

    def rewrap(
        self, saga_id: str, *, old_kek_id: str, old_wrapped: bytes, kek_id: str, wrapped: bytes
    ) -> bool:
        """Replace the wrapped key if unchanged since it was read."""
        try:
            done = self._conn().execute(
                _q(
                    "UPDATE {table} SET kek_id = %s, wrapped = %s, rewrapped_at = now() "
                    "WHERE saga_id = %s AND kek_id = %s AND wrapped = %s"
                ),
                (kek_id, wrapped, saga_id, old_kek_id, old_wrapped),
            )
        except psycopg.Error as exc:
            raise _mapped("rewrapping a data key", exc) from exc
        return done.rowcount == 1

    def kek_ids(self) -> set[str]:
        """The KEKs live keys are wrapped under: a skip scan of the ``kek_id`` index, one
        probe per distinct id, however many keys there are."""
        try:
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
        except psycopg.Error as exc:
            raise _mapped("listing key-encryption key ids", exc) from exc
        return {str(kek_id) for (kek_id,) in rows}

    def count_by_kek(self) -> dict[str, int]:
        """How many live keys each KEK wraps."""
        try:
            rows = (
                self._conn()
                .execute(
                    _q("SELECT kek_id, count(*) FROM {table} WHERE kek_id IS NOT NULL GROUP BY 1")
                )
                .fetchall()
            )
        except psycopg.Error as exc:
            raise _mapped("counting data keys", exc) from exc
        return {str(kek_id): int(n) for kek_id, n in rows}  # type: ignore[call-overload]


def key_service_from_env(
    conninfo: str,
    env: Mapping[str, str] | None = None,
    *,
    cache_size: int = 4096,
    cache_ttl: float = 60.0,
) -> KeyService | None:
    """The key service of a process: its KEKs from ``SAGACITY_KEY_ENCRYPTION_KEY_FILE``, its
    keys in the database at ``conninfo``; ``None`` when the variable is not set (the journal
    then runs without encryption, and says so).

    The store is created if missing and checked (:meth:`KeyService.check`): stored keys
    wrapped under a KEK this process does not hold are warned of, naming the variable, and
    the process starts all the same (those sagas' messages fail one by one).

    Raises:
        KeyEncryptionKeyError: the variable names a missing or malformed file (the message
            names the variable).
        PersistenceError: the database could not be reached.
    """
    value = (os.environ if env is None else env).get(KEK_SETTING)
    if value is None:
        return None
    keyring = KeyRing.from_setting(value)
    service = KeyService(
        PostgresKeyStore(conninfo), keyring, cache_size=cache_size, cache_ttl=cache_ttl
    )
    try:
        unheld = service.check()
    except BaseException:
        service.close()
        raise
    if unheld:
        log.warning(
            "%s: some data keys are wrapped under key-encryption key(s) %s, which this process "
            "does not hold (it holds %s): those sagas' sealed events cannot be opened here and "
            "are quarantined or dead-lettered one by one; add the key file if they should be "
            "(docs/operations/keys.md)",
            KEK_SETTING,
            ", ".join(unheld),
            ", ".join(keyring.key_ids),
        )
    return service
