"""The approvals service's working state in PostgreSQL (:class:`~sagacity.ports.RequestStore`):
requests, their state, the attention queue, consumer offsets.

The table is a materialised view of the chain, kept so pending requests survive a restart and
can be listed without scanning the topic, and so replicas have a row to lock.  It is never
evidence: every decision and every resume reads the saga's chain through the core.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors
from psycopg.rows import dict_row

from sagacity import _attributes as attr
from sagacity._defaults import DEFAULT_TOPIC
from sagacity._events import EventType, JournalEntry
from sagacity._requests import AWAITING_RESULT
from sagacity.errors import DecisionInProgressError
from sagacity.ports import OPEN_STATES, AttentionRow, GateStats, RequestRow, RowState
from sagacity.postgres._attention import SCHEMA as ATTENTION_SCHEMA
from sagacity.postgres._attention import TOPIC_SCHEMA as ATTENTION_TOPIC_SCHEMA
from sagacity.postgres._attention import apply_attention, attention_rows
from sagacity.postgres._connect import connect
from sagacity.postgres._errors import map_error
from sagacity.postgres._migrate import migrate

SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_approval_request (
    topic                   text    NOT NULL,
    saga_id                 text    NOT NULL,
    seq                     integer NOT NULL,
    tool                    text    NOT NULL,
    payload                 text    NOT NULL,
    payload_sha256          text,
    requested_at_us         bigint  NOT NULL,
    expires_at_us           bigint,
    signatures_required     integer NOT NULL,
    policy_version          text    NOT NULL,
    reversibility           text    NOT NULL,
    state                   text    NOT NULL DEFAULT 'pending',
    signed_by               text[]  NOT NULL DEFAULT '{}',
    decision                text,
    decided_by              text,
    decided_at_us           bigint,
    decision_policy_version text,
    closed_at_us            bigint,
    PRIMARY KEY (topic, saga_id, seq)
);
CREATE INDEX IF NOT EXISTS sagacity_approval_request_open
    ON sagacity_approval_request (requested_at_us) WHERE state IN ('pending', 'approved');
CREATE INDEX IF NOT EXISTS sagacity_approval_request_decided
    ON sagacity_approval_request (decided_at_us) WHERE decided_at_us IS NOT NULL;
-- Tables made before requests recorded their topic: add it, key by it.
ALTER TABLE sagacity_approval_request ADD COLUMN IF NOT EXISTS topic text NOT NULL DEFAULT '';
ALTER TABLE sagacity_approval_request ALTER COLUMN topic DROP DEFAULT;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = 'sagacity_approval_request'::regclass AND i.indisprimary
          AND a.attname = 'topic'
    ) THEN
        ALTER TABLE sagacity_approval_request DROP CONSTRAINT sagacity_approval_request_pkey;
        ALTER TABLE sagacity_approval_request ADD PRIMARY KEY (topic, saga_id, seq);
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS sagacity_approval_offset (
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""


def _row(record: dict[str, Any]) -> RequestRow:
    return RequestRow(
        saga_id=record["saga_id"],
        seq=record["seq"],
        tool=record["tool"],
        payload=record["payload"],
        payload_sha256=record["payload_sha256"],
        requested_at_us=record["requested_at_us"],
        expires_at_us=record["expires_at_us"],
        signatures_required=record["signatures_required"],
        policy_version=record["policy_version"],
        reversibility=record["reversibility"],
        state=RowState(record["state"]),
        signed_by=tuple(record["signed_by"] or ()),
        decision=record["decision"],
        decided_by=record["decided_by"],
        decided_at_us=record["decided_at_us"],
        decision_policy_version=record["decision_policy_version"],
        closed_at_us=record["closed_at_us"],
    )


def _int(raw: str | None, default: int | None) -> int | None:
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        return default


_CLOSING = {
    EventType.REJECTED: RowState.REJECTED,
    EventType.EXPIRED: RowState.EXPIRED,
    EventType.RESUME_REFUSED: RowState.REFUSED,
    EventType.CONSTRAINT_VIOLATED: RowState.REFUSED,
    EventType.INTENT: RowState.RESUMED,
}


def apply_entry(conn: psycopg.Connection[Any], entry: JournalEntry, *, topic: str) -> None:
    """Fold one journal event of ``topic`` into the table; idempotent, so replays and repeats
    are harmless.  Rows are keyed by topic: two topics sharing a database never mix.

    The rules follow ``sagacity._requests`` (docs/adr/0005): the ``AWAITING_APPROVAL`` entry is
    the request, decisions refer to it by ``ref_seq``, ``COMPENSATION_REQUESTED`` or a final
    ``SAGA_ENDED`` closes whatever is still open before it.
    """
    kind = entry.event_type
    apply_attention(conn, entry, topic=topic)
    if kind is EventType.AWAITING_APPROVAL:
        conn.execute(
            """INSERT INTO sagacity_approval_request (topic, saga_id, seq, tool, payload,
                   payload_sha256, requested_at_us, expires_at_us, signatures_required,
                   policy_version, reversibility)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (topic, saga_id, seq) DO NOTHING""",
            (
                topic,
                entry.saga_id,
                entry.seq,
                entry.tool or "",
                entry.payload or "",
                entry.attributes.get(attr.PAYLOAD_SHA256) or None,
                entry.recorded_at_us,
                _int(entry.attributes.get(attr.EXPIRES_AT_US), None),
                # A damaged count must not lower the bar (as the core reads it).
                max(1, _int(entry.attributes.get(attr.SIGNATURES_REQUIRED), 2) or 2),
                entry.attributes.get(attr.POLICY_VERSION, ""),
                entry.attributes.get(attr.REVERSIBILITY, ""),
            ),
        )
        return
    if kind is EventType.COMPENSATION_REQUESTED or (
        kind is EventType.SAGA_ENDED and entry.result != AWAITING_RESULT
    ):
        conn.execute(
            """UPDATE sagacity_approval_request SET state = 'ended', closed_at_us = %s
               WHERE topic = %s AND saga_id = %s AND seq < %s
                 AND state IN ('pending', 'approved')""",
            (entry.recorded_at_us, topic, entry.saga_id, entry.seq),
        )
        return
    ref = _int(entry.attributes.get(attr.REF_SEQ), None)
    if ref is None:
        return
    policy = entry.attributes.get(attr.POLICY_VERSION)
    if kind is EventType.APPROVED and entry.actor:
        conn.execute(
            """UPDATE sagacity_approval_request
               SET signed_by = array_append(signed_by, %(actor)s)
               WHERE topic = %(topic)s AND saga_id = %(saga)s AND seq = %(ref)s
                 AND state = 'pending' AND NOT (%(actor)s = ANY(signed_by))""",
            {"actor": entry.actor, "topic": topic, "saga": entry.saga_id, "ref": ref},
        )
        conn.execute(
            """UPDATE sagacity_approval_request
               SET state = 'approved', decision = 'approved', decided_by = %(actor)s,
                   decided_at_us = %(at)s, decision_policy_version = %(policy)s
               WHERE topic = %(topic)s AND saga_id = %(saga)s AND seq = %(ref)s
                 AND state = 'pending' AND cardinality(signed_by) >= signatures_required""",
            {
                "topic": topic,
                "actor": entry.actor,
                "at": entry.recorded_at_us,
                "policy": policy,
                "saga": entry.saga_id,
                "ref": ref,
            },
        )
        return
    # An event type this release does not know closes nothing (neutral, as in the core).
    state = _CLOSING.get(kind) if isinstance(kind, EventType) else None
    if state is None:
        return
    # A human rejection is the request's decision; other closings keep an earlier approval.
    conn.execute(
        """UPDATE sagacity_approval_request
           SET state = %(state)s, closed_at_us = %(at)s,
               decision = CASE WHEN %(decision)s::text IS NOT NULL AND decision IS NULL
                               THEN %(decision)s ELSE decision END,
               decided_by = CASE WHEN %(decision)s::text IS NOT NULL AND decision IS NULL
                                 THEN %(actor)s ELSE decided_by END,
               decided_at_us = CASE WHEN %(decision)s::text IS NOT NULL AND decision IS NULL
                                    THEN %(at)s ELSE decided_at_us END,
               decision_policy_version = CASE
                   WHEN %(decision)s::text IS NOT NULL AND decision IS NULL
                   THEN %(policy)s ELSE decision_policy_version END
           WHERE topic = %(topic)s AND saga_id = %(saga)s AND seq = %(ref)s
             AND state IN ('pending', 'approved')""",
        {
            "topic": topic,
            "state": state.value,
            "at": entry.recorded_at_us,
            "decision": {RowState.REJECTED: "rejected", RowState.EXPIRED: "expired"}.get(state),
            "actor": entry.actor,
            "policy": policy,
            "saga": entry.saga_id,
            "ref": ref,
        },
    )


COMPONENT = "sagacity_approvals"
"""The tables' migrations are recorded in ``sagacity_approvals_schema_version``."""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, SCHEMA + ATTENTION_SCHEMA),
    (2, ATTENTION_TOPIC_SCHEMA),
)
"""The request, offset and attention tables, then the attention queue keyed by topic (each
statement re-runnable)."""


class PostgresRequestStore:
    """The working table on one PostgreSQL database.

    Args:
        dsn: a libpq conninfo or URL.
        topic: the journal topic whose requests this store holds; the rows of other topics
            in the same database are neither read nor written.
        connect_timeout: seconds to wait for a connection.

    Every psycopg error is mapped by :mod:`sagacity.postgres._errors` (a lost connection is
    retryable), a lock another decision holds to
    :class:`~sagacity.errors.DecisionInProgressError`.
    """

    def __init__(
        self, dsn: str, *, topic: str = DEFAULT_TOPIC, connect_timeout: float = 5.0
    ) -> None:
        self._dsn = dsn
        self.topic = topic
        self._timeout = connect_timeout

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction (committed on success, rolled back on error)."""
        conn = connect(
            self._dsn,
            timeout=self._timeout,
            row_factory=dict_row,
            action="cannot connect to PostgreSQL",
        )
        try:
            with conn.transaction():
                yield conn
        except psycopg.errors.LockNotAvailable as exc:
            raise DecisionInProgressError(
                "another decision on this request holds its lock; retry shortly"
            ) from exc
        except psycopg.Error as exc:
            raise map_error(exc, "PostgreSQL refused the operation") from exc
        finally:
            conn.close()

    def migrate(self) -> None:
        """Create the tables and indexes if they do not exist (safe on every start)."""
        with self.connect() as conn:
            # Replicas starting together: the runner's lock keeps CREATE TABLE from racing.
            migrate(conn, COMPONENT, MIGRATIONS)
            # Rows made before requests recorded their topic belong to the service that ran.
            conn.execute(
                "UPDATE sagacity_approval_request SET topic = %s WHERE topic = ''", (self.topic,)
            )
            conn.execute("UPDATE sagacity_attention SET topic = %s WHERE topic = ''", (self.topic,))

    def ping(self) -> None:
        """Raise :class:`PersistenceError` unless the database answers."""
        with self.connect() as conn:
            conn.execute("SELECT 1")

    def apply(self, entries: Iterable[JournalEntry]) -> None:
        """Fold ``entries`` into the table in one transaction (see :func:`apply_entry`).

        Raises:
            PersistenceError: the database failed; nothing was folded.
        """
        with self.connect() as conn:
            for entry in entries:
                apply_entry(conn, entry, topic=self.topic)

    def apply_in(self, conn: psycopg.Connection[Any], entry: JournalEntry) -> None:
        """:func:`apply_entry` for this store's topic, in ``conn``'s transaction."""
        apply_entry(conn, entry, topic=self.topic)

    # -- reading ----------------------------------------------------------------------------
    def get(self, saga_id: str, seq: int) -> RequestRow | None:
        """The row of one request, if materialised."""
        with self.connect() as conn:
            return self.get_in(conn, saga_id, seq)

    def get_in(
        self, conn: psycopg.Connection[Any], saga_id: str, seq: int, *, lock: bool = False
    ) -> RequestRow | None:
        """The row, read in ``conn``'s transaction; ``lock`` takes its row lock (FOR UPDATE)."""
        query = (
            "SELECT * FROM sagacity_approval_request WHERE topic = %s AND saga_id = %s AND seq = %s"
        )
        if lock:
            query += " FOR UPDATE"
        record = conn.execute(query, (self.topic, saga_id, seq)).fetchone()
        return _row(record) if record is not None else None

    def requests(
        self,
        *,
        states: Sequence[str] = OPEN_STATES,
        tools: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[RequestRow]:
        """Requests in ``states`` (open by default), oldest first; ``tools`` filters by tool."""
        with self.connect() as conn:
            if tools is None:
                records = conn.execute(
                    """SELECT * FROM sagacity_approval_request
                       WHERE topic = %s AND state = ANY(%s)
                       ORDER BY requested_at_us, saga_id, seq LIMIT %s""",
                    (self.topic, list(states), limit),
                ).fetchall()
            else:
                records = conn.execute(
                    """SELECT * FROM sagacity_approval_request
                       WHERE topic = %s AND state = ANY(%s) AND tool = ANY(%s)
                       ORDER BY requested_at_us, saga_id, seq LIMIT %s""",
                    (self.topic, list(states), list(tools), limit),
                ).fetchall()
        return [_row(r) for r in records]

    def attention(self, *, limit: int = 500) -> list[AttentionRow]:
        """Sagas of this topic whose last run ended ``COMPENSATION_FAILED``, oldest first."""
        with self.connect() as conn:
            return attention_rows(conn, topic=self.topic, limit=limit)

    def decided(self, *, since_us: int) -> list[RequestRow]:
        """Requests of this topic decided (approved, rejected, expired) at or after
        ``since_us``."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %s AND decided_at_us >= %s ORDER BY decided_at_us""",
                (self.topic, since_us),
            ).fetchall()
        return [_row(r) for r in records]

    def closed(self, states: Sequence[str], *, since_us: int, limit: int = 200) -> list[RequestRow]:
        """Requests of this topic closed in ``states`` at or after ``since_us``, newest
        first."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %s AND state = ANY(%s) AND closed_at_us >= %s
                   ORDER BY closed_at_us DESC LIMIT %s""",
                (self.topic, list(states), since_us, limit),
            ).fetchall()
        return [_row(r) for r in records]

    def overdue(self, now_us: int, ttl_us: int | None, *, limit: int = 100) -> list[RequestRow]:
        """Open requests past their deadline (their own, or ``requested_at + ttl_us``)."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %(topic)s AND state IN ('pending', 'approved')
                     AND LEAST(expires_at_us, requested_at_us + %(ttl)s::bigint) < %(now)s
                   ORDER BY requested_at_us LIMIT %(limit)s""",
                {"topic": self.topic, "ttl": ttl_us, "now": now_us, "limit": limit},
            ).fetchall()
        return [_row(r) for r in records]

    def stats(self, *, now_us: int, window_s: float) -> GateStats:
        """Gate metrics for decisions journaled in the last ``window_s`` seconds."""
        since = now_us - int(window_s * 1_000_000)
        with self.connect() as conn:
            decided = conn.execute(
                """SELECT
                     count(*) FILTER (WHERE decision = 'approved') AS approved,
                     count(*) FILTER (WHERE decision = 'rejected') AS rejected,
                     count(*) FILTER (WHERE decision = 'expired') AS expired,
                     percentile_cont(0.5) WITHIN GROUP (ORDER BY decided_at_us - requested_at_us)
                         FILTER (WHERE decision IN ('approved', 'rejected')) AS p50,
                     percentile_cont(0.95) WITHIN GROUP (ORDER BY decided_at_us - requested_at_us)
                         FILTER (WHERE decision IN ('approved', 'rejected')) AS p95
                   FROM sagacity_approval_request WHERE topic = %s AND decided_at_us >= %s""",
                (self.topic, since),
            ).fetchone()
            waiting = conn.execute(
                """SELECT count(*) AS pending, min(requested_at_us) AS oldest
                   FROM sagacity_approval_request
                   WHERE topic = %s AND state IN ('pending', 'approved')""",
                (self.topic,),
            ).fetchone()
        assert decided is not None
        assert waiting is not None
        oldest = waiting["oldest"]
        return GateStats(
            window_s=window_s,
            approved=decided["approved"],
            rejected=decided["rejected"],
            expired=decided["expired"],
            pending=waiting["pending"],
            oldest_pending_age_s=(now_us - oldest) / 1e6 if oldest is not None else None,
            latency_p50_s=decided["p50"] / 1e6 if decided["p50"] is not None else None,
            latency_p95_s=decided["p95"] / 1e6 if decided["p95"] is not None else None,
        )

    # -- consumer positions -----------------------------------------------------------------
    @staticmethod
    def offsets_in(conn: psycopg.Connection[Any], topic: str) -> dict[int, int]:
        """The next offset to read per partition of ``topic``."""
        records = conn.execute(
            "SELECT partition, next_offset FROM sagacity_approval_offset WHERE topic = %s",
            (topic,),
        ).fetchall()
        return {r["partition"]: r["next_offset"] for r in records}

    def offsets(self, topic: str) -> dict[int, int]:
        """:meth:`offsets_in` in a transaction of its own."""
        with self.connect() as conn:
            return self.offsets_in(conn, topic)

    @staticmethod
    def store_offset(
        conn: psycopg.Connection[Any], topic: str, partition: int, next_offset: int
    ) -> None:
        """Record the consumer's position, in the same transaction as the rows it produced."""
        conn.execute(
            """INSERT INTO sagacity_approval_offset (topic, partition, next_offset)
               VALUES (%s, %s, %s)
               ON CONFLICT (topic, partition) DO UPDATE
               SET next_offset = GREATEST(sagacity_approval_offset.next_offset,
                                          EXCLUDED.next_offset)""",
            (topic, partition, next_offset),
        )
