"""The claims in Postgres (:class:`~sagacity.ports.ClaimStore`): one row per compensated step,
written before its undo is called.

The row is the service's memory of what it did to the outside world, independent of Kafka:

* primary key ``(journal, saga_id, step_seq, step_hash)``: a step of one journal (its
  ``EXECUTED`` seq and entry hash) is claimed once; a second attempt finds the row and learns
  what the first one got to.  Journals sharing the database (the same saga id on two topics)
  and another entry at the same seq have rows of their own;
* ``status`` ``CLAIMED`` (the call may be in flight, or may have happened), ``COMPENSATED``
  (the call returned; ``result`` kept), ``FAILED`` (it raised: nothing to undo twice),
  ``TIMED_OUT`` (it did not return in time: in doubt);
* rows the table held before migration 2 named no journal and no step hash (both ``''``):
  they are *unbound* claims, reported as such for their saga id and seq on every journal and
  never written again (docs/adr/0007-compensation-exactly-once.md, "Claims bound to their
  journal");
* a session advisory lock per saga id keeps two instances from compensating the same saga at
  once; Postgres drops it when the holder's connection dies (``kill -9`` included).  It is
  keyed by the saga id alone, as before migration 2, so it serialises the same saga id on two
  journals (harmless) and an instance of the previous release still excludes this one.

See docs/adr/0007-compensation-exactly-once.md.
"""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

from sagacity.ports import Claim, ClaimStatus, check_claim_key
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


_STEP = "journal = %s AND saga_id = %s AND step_seq = %s AND step_hash = %s"
"""A claim's key, as a condition on its four parameters."""
_COLUMNS = "step_seq, step_hash, status, attempts, result, result_encoding, error, journal"
"""What :func:`_claim` reads of a row."""


def _q(text: str) -> sql.Composed:
    """``text`` with ``{table}`` bound to the claims table (an identifier, never a value),
    ``{step}`` to the claim's key condition and ``{columns}`` to what a claim is read from."""
    return sql.SQL(text).format(
        table=sql.Identifier(TABLE), step=sql.SQL(_STEP), columns=sql.SQL(_COLUMNS)
    )


_BIND = f"""
ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS journal text NOT NULL DEFAULT '';
ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS step_hash text NOT NULL DEFAULT '';
ALTER TABLE {TABLE} ALTER COLUMN journal DROP DEFAULT;
ALTER TABLE {TABLE} ALTER COLUMN step_hash DROP DEFAULT;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = '{TABLE}'::regclass AND i.indisprimary AND a.attname = 'step_hash'
    ) THEN
        ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey;
        ALTER TABLE {TABLE} ADD PRIMARY KEY (journal, saga_id, step_seq, step_hash);
    END IF;
END $$;
"""  # noqa: S608
"""Migration 2: claims bound to their journal and step.  The rows already there keep ``''``
for both (unbound: see the module documentation); the columns then have no default, so a
writer of the previous release (which names neither) is refused and calls nothing."""


def _migrations() -> tuple[tuple[int, str], ...]:
    return ((1, _q(_SCHEMA).as_string()), (2, _BIND))


class PostgresClaimStore:
    """Claims of one journal and saga locks on one Postgres database; a connection per thread.

    Errors are mapped by :mod:`sagacity.postgres._errors`: a lost connection raises
    :class:`~sagacity.errors.PersistenceUnavailableError` (the next call reconnects).

    Args:
        conninfo: libpq URL or conninfo (its ``search_path`` picks the schema).
        instance: this instance's id, recorded on claims.
        journal: the journal's identity, part of every claim's key (the composition root's
            ``sagacity._env.journal_identity``).

    Raises:
        ValueError: ``journal`` is empty.
    """

    def __init__(self, conninfo: str, *, instance: str, journal: str) -> None:
        check_claim_key(journal)
        self._conninfo = conninfo
        self._instance = instance
        self._journal = journal
        self._local = threading.local()
        self._all: list[psycopg.Connection[tuple[object, ...]]] = []
        self._all_lock = threading.Lock()

    @property
    def journal(self) -> str:
        """The journal whose claims this store keeps."""
        return self._journal

    def _conn(self) -> psycopg.Connection[tuple[object, ...]]:
        conn: psycopg.Connection[tuple[object, ...]] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self._conninfo, autocommit=True, action="connect to the claims database")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def ensure_schema(self) -> None:
        """Create the claims table if it does not exist, and bring it to this release's form.

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
    def claim(self, saga_id: str, step_seq: int, *, step_hash: str, target: str, key: str) -> Claim:
        """Create the step's claim, or return the existing one.

        A fresh claim (``fresh=True``, status ``CLAIMED``) means no attempt was ever started
        on this journal's step; when an unbound claim of the saga id and seq exists, that one
        is returned instead (``unbound=True``).

        Raises:
            ValueError: ``step_hash`` is not an entry hash.
            PersistenceError: the database failed.
        """
        check_claim_key(self._journal, step_hash)
        step = (self._journal, saga_id, step_seq, step_hash)
        conn = self._conn()
        with mapped_errors("claim a step"):
            row = conn.execute(
                _q(
                    "INSERT INTO {table} (journal, saga_id, step_seq, step_hash, target, "
                    "idempotency_key, instance, status) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, 'CLAIMED') "
                    "ON CONFLICT (journal, saga_id, step_seq, step_hash) DO NOTHING "
                    "RETURNING attempts"
                ),
                (*step, target, key, self._instance),
            ).fetchone()
            if row is None:
                found = conn.execute(
                    _q("SELECT {columns} FROM {table} WHERE {step}"), step
                ).fetchone()
                assert found is not None  # only prune deletes rows, and never a CLAIMED one
                return _claim(saga_id, found)
            unbound = conn.execute(
                _q("SELECT {columns} FROM {table} WHERE {step}"),
                ("", saga_id, step_seq, ""),
            ).fetchone()
        if unbound is not None:
            return _claim(saga_id, unbound)
        return Claim(
            saga_id=saga_id,
            step_seq=step_seq,
            step_hash=step_hash,
            status=ClaimStatus.CLAIMED,
            attempts=1,
            fresh=True,
        )

    def restart(self, saga_id: str, step_seq: int, *, step_hash: str) -> None:
        """Record that the step's undo is being started again."""
        self._execute(
            "record a restart",
            "UPDATE {table} SET attempts = attempts + 1, status = 'CLAIMED', instance = %s, "
            "error = NULL WHERE {step}",
            (self._instance, self._journal, saga_id, step_seq, step_hash),
        )

    def record(
        self,
        saga_id: str,
        step_seq: int,
        status: ClaimStatus,
        *,
        step_hash: str,
        result: str | None = None,
        result_encoding: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record how the step's undo ended."""
        self._execute(
            "record an outcome",
            "UPDATE {table} SET status = %s, result = %s, result_encoding = %s, error = %s, "
            "finished_at = now() WHERE {step}",
            (
                status.value,
                result,
                result_encoding,
                error,
                self._journal,
                saga_id,
                step_seq,
                step_hash,
            ),
        )

    def _execute(self, action: str, query: str, params: tuple[object, ...]) -> None:
        conn = self._conn()
        with mapped_errors(action):
            conn.execute(_q(query), params)

    def claims(self, saga_id: str) -> list[Claim]:
        """The saga's claims on this journal and its unbound ones, by step."""
        conn = self._conn()
        with mapped_errors("read claims"):
            rows = conn.execute(
                _q(
                    "SELECT {columns} FROM {table} WHERE journal IN (%s, '') "
                    "AND saga_id = %s ORDER BY step_seq, journal, step_hash"
                ),
                (self._journal, saga_id),
            ).fetchall()
        return [_claim(saga_id, r) for r in rows]

    def prune(self, *, older_than_s: float, apply: bool) -> int:
        """Delete (with ``apply``; else count) this journal's and unbound settled claims
        finished over ``older_than_s`` seconds ago: ``COMPENSATED`` and ``FAILED`` only.
        ``CLAIMED`` and ``TIMED_OUT`` claims are the evidence of a call in doubt and are never
        removed; another journal's claims are that journal's to prune (its topic's retention
        decides).

        Raises:
            PersistenceError: the database could not be reached or refused.
        """
        where = (
            "journal IN (%s, '') AND status IN ('COMPENSATED', 'FAILED')"
            " AND finished_at IS NOT NULL AND finished_at < now() - make_interval(secs => %s)"
        )
        verb = "DELETE FROM {table} WHERE " if apply else "SELECT count(*) FROM {table} WHERE "
        conn = self._conn()
        with mapped_errors("prune claims"):
            cursor = conn.execute(_q(verb + where), (self._journal, older_than_s))
            count = cursor.rowcount if apply else int(str(cursor.fetchone()[0]))  # type: ignore[index]
        return max(count, 0)

    def close(self) -> None:
        """Close every connection (their saga locks are released with them)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def _claim(saga_id: str, row: tuple[object, ...]) -> Claim:
    """The claim of a row selected as :data:`_COLUMNS`."""
    step_seq, step_hash, status, attempts, result, encoding, error, journal = row
    unbound = journal == ""
    if unbound:  # another journal's result, perhaps: never handed over as this step's
        result = encoding = None
    return Claim(
        saga_id=saga_id,
        step_seq=int(str(step_seq)),
        step_hash=str(step_hash),
        status=ClaimStatus(str(status)),
        attempts=int(str(attempts)),
        result=None if result is None else str(result),
        result_encoding=None if encoding is None else str(encoding),
        error=None if error is None else str(error),
        unbound=unbound,
    )
