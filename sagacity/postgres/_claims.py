"""The claims in Postgres (:class:`~sagacity.ports.ClaimStore`): one row per compensated step,
written before its undo is called.

The row is the service's memory of what it did to the outside world, independent of Kafka:

* ``UNIQUE (saga_id, step_seq)`` (the primary key): a step is claimed once; a second attempt
  finds the row and learns what the first one got to;
* ``status`` ``CLAIMED`` (the call may be in flight, or may have happened), ``COMPENSATED``
  (the call returned; ``result`` kept), ``FAILED`` (it raised: nothing to undo twice),
  ``TIMED_OUT`` (it did not return in time: in doubt);
* a session advisory lock per saga keeps two instances from compensating the same saga at
  once; Postgres drops it when the holder's connection dies (``kill -9`` included).

See docs/adr/0007-compensation-exactly-once.md.
"""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

from sagacity.ports import Claim, ClaimStatus
from sagacity.postgres._connect import connect
from sagacity.postgres._connect import ping as ping_database
from sagacity.postgres._errors import mapped_errors
from sagacity.postgres._migrate import migrate

TABLE = "sagacity_compensation_claims"

COMPONENT = "sagacity_compensation"
"""The claims' migrations are recorded in ``sagacity_compensation_schema_version``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    saga_id          text        NOT NULL,
    step_seq         integer     NOT NULL,
    target           text        NOT NULL,
    idempotency_key  text        NOT NULL,
    instance         text        NOT NULL,
    status           text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    result           text,
    result_encoding  text,
    error            text,
    claimed_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    PRIMARY KEY (saga_id, step_seq)
)
"""

# One advisory-lock namespace for the service (the first key of the two-int form).
_LOCK_SPACE = 0x5A6A


def _q(text: str) -> sql.Composed:
    """``text`` with ``{table}`` bound to the claims table (an identifier, never a value)."""
    return sql.SQL(text).format(table=sql.Identifier(TABLE))


def _migrations() -> tuple[tuple[int, str], ...]:
    return ((1, _q(_SCHEMA).as_string()),)


class PostgresClaimStore:
    """Claims and saga locks on one Postgres database; a connection per thread.

    Errors are mapped by :mod:`sagacity.postgres._errors`: a lost connection raises
    :class:`~sagacity.errors.PersistenceUnavailableError` (the next call reconnects).

    Args:
        conninfo: libpq URL or conninfo (its ``search_path`` picks the schema).
        instance: this instance's id, recorded on claims.
    """

    def __init__(self, conninfo: str, *, instance: str) -> None:
        self._conninfo = conninfo
        self._instance = instance
        self._local = threading.local()
        self._all: list[psycopg.Connection[tuple[object, ...]]] = []
        self._all_lock = threading.Lock()

    def _conn(self) -> psycopg.Connection[tuple[object, ...]]:
        conn: psycopg.Connection[tuple[object, ...]] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self._conninfo, autocommit=True, action="connect to the claims database")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def ensure_schema(self) -> None:
        """Create the claims table if it does not exist.

        Raises:
            PersistenceError: the database could not be reached or refused.
        """
        # Instances start together: the runner's advisory lock keeps CREATE TABLE IF NOT EXISTS
        # from racing a concurrent twin (both pass the check, one fails on the catalog).
        migrate(self._conn(), COMPONENT, _migrations())

    def ping(self) -> bool:
        """The database answers (on a short-lived connection of its own)."""
        return ping_database(self._conninfo)

    # --- saga locks ----------------------------------------------------------------------
    def try_lock_saga(self, saga_id: str) -> bool:
        """Take the saga's lock on this thread's session without waiting; ``True`` if held."""
        conn = self._conn()
        with mapped_errors("lock a saga"):
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_LOCK_SPACE, saga_id)
            ).fetchone()
        return bool(row and row[0])

    def unlock_saga(self, saga_id: str) -> None:
        """Release the saga's lock held by this thread's session."""
        conn = self._conn()
        with mapped_errors("unlock a saga"):
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_SPACE, saga_id))

    # --- claims --------------------------------------------------------------------------
    def claim(self, saga_id: str, step_seq: int, *, target: str, key: str) -> Claim:
        """Create the step's claim, or return the existing one locked for this attempt.

        A fresh claim (``fresh=True``, status ``CLAIMED``) means no attempt was ever started.

        Raises:
            PersistenceError: the database failed.
        """
        conn = self._conn()
        with mapped_errors("claim a step"):
            row = conn.execute(
                _q(
                    "INSERT INTO {table} (saga_id, step_seq, target, idempotency_key, instance, "
                    "status) VALUES (%s, %s, %s, %s, %s, 'CLAIMED') "
                    "ON CONFLICT (saga_id, step_seq) DO NOTHING RETURNING attempts"
                ),
                (saga_id, step_seq, target, key, self._instance),
            ).fetchone()
            if row is not None:
                return Claim(
                    saga_id=saga_id,
                    step_seq=step_seq,
                    status=ClaimStatus.CLAIMED,
                    attempts=1,
                    fresh=True,
                )
            found = conn.execute(
                _q(
                    "SELECT status, attempts, result, result_encoding FROM {table} "
                    "WHERE saga_id = %s AND step_seq = %s"
                ),
                (saga_id, step_seq),
            ).fetchone()
        assert found is not None  # rows are never deleted
        return Claim(
            saga_id=saga_id,
            step_seq=step_seq,
            status=ClaimStatus(str(found[0])),
            attempts=int(str(found[1])),
            result=None if found[2] is None else str(found[2]),
            result_encoding=None if found[3] is None else str(found[3]),
        )

    def restart(self, saga_id: str, step_seq: int) -> None:
        """Record that the step's undo is being started again."""
        self._execute(
            "record a restart",
            "UPDATE {table} SET attempts = attempts + 1, status = 'CLAIMED', instance = %s, "
            "error = NULL WHERE saga_id = %s AND step_seq = %s",
            (self._instance, saga_id, step_seq),
        )

    def record(
        self,
        saga_id: str,
        step_seq: int,
        status: ClaimStatus,
        *,
        result: str | None = None,
        result_encoding: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record how the step's undo ended."""
        self._execute(
            "record an outcome",
            "UPDATE {table} SET status = %s, result = %s, result_encoding = %s, error = %s, "
            "finished_at = now() WHERE saga_id = %s AND step_seq = %s",
            (status.value, result, result_encoding, error, saga_id, step_seq),
        )

    def _execute(self, action: str, query: str, params: tuple[object, ...]) -> None:
        conn = self._conn()
        with mapped_errors(action):
            conn.execute(_q(query), params)

    def claims(self, saga_id: str) -> list[Claim]:
        """Every claim of the saga, by step."""
        conn = self._conn()
        with mapped_errors("read claims"):
            rows = conn.execute(
                _q(
                    "SELECT step_seq, status, attempts, result, result_encoding, error "
                    "FROM {table} WHERE saga_id = %s ORDER BY step_seq"
                ),
                (saga_id,),
            ).fetchall()
        return [
            Claim(
                saga_id=saga_id,
                step_seq=int(str(r[0])),
                status=ClaimStatus(str(r[1])),
                attempts=int(str(r[2])),
                result=None if r[3] is None else str(r[3]),
                result_encoding=None if r[4] is None else str(r[4]),
                error=None if r[5] is None else str(r[5]),
            )
            for r in rows
        ]

    def prune(self, *, older_than_s: float, apply: bool) -> int:
        """Delete (with ``apply``; else count) settled claims finished over ``older_than_s``
        seconds ago: ``COMPENSATED`` and ``FAILED`` only.  ``CLAIMED`` and ``TIMED_OUT`` claims
        are the evidence of a call in doubt and are never removed.

        Raises:
            PersistenceError: the database could not be reached or refused.
        """
        where = (
            "status IN ('COMPENSATED', 'FAILED') AND finished_at IS NOT NULL"
            " AND finished_at < now() - make_interval(secs => %s)"
        )
        verb = "DELETE FROM {table} WHERE " if apply else "SELECT count(*) FROM {table} WHERE "
        conn = self._conn()
        with mapped_errors("prune claims"):
            cursor = conn.execute(_q(verb + where), (older_than_s,))
            count = cursor.rowcount if apply else int(str(cursor.fetchone()[0]))  # type: ignore[index]
        return max(count, 0)

    def close(self) -> None:
        """Close every connection (their saga locks are released with them)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
