"""The approvals projection's acceptance state: each saga's tail, and what it refused.

The projection folds the whole topic, so it keeps each saga's accepted tail (seq, hash), not
its chain, and judges every event with the core's rule (:func:`sagacity.chain._acceptance.admit`)
before folding it: only the saga's next linked event counts.  Refused events are kept with
their reason in ``sagacity_approval_quarantine`` (never folded, never shown as a request).

Tails are read under the saga's advisory lock (the one folding and deciding take), once per
transaction, and written back when the transaction's batch is done
(docs/adr/0025-trust-model.md).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from sagacity.chain._acceptance import Refusal, Tail
from sagacity.entries._events import JournalEntry
from sagacity.ports import Fault as Fault  # the port's value, kept under its old name
from sagacity.ports import QuarantinedEvent

SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_approval_tail (
    topic   text   NOT NULL,
    saga_id text   NOT NULL,
    seq     bigint NOT NULL,
    hash    text   NOT NULL,
    PRIMARY KEY (topic, saga_id)
);
CREATE TABLE IF NOT EXISTS sagacity_approval_quarantine (
    topic      text      NOT NULL,
    id         bigserial NOT NULL,
    saga_id    text      NOT NULL,
    seq        bigint    NOT NULL,
    event_type text      NOT NULL,
    kind       text      NOT NULL,
    detail     text      NOT NULL,
    hash       text      NOT NULL,
    partition  integer,
    "offset"   bigint,
    PRIMARY KEY (topic, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS sagacity_approval_quarantine_position
    ON sagacity_approval_quarantine (topic, partition, "offset") WHERE "offset" IS NOT NULL;
CREATE INDEX IF NOT EXISTS sagacity_approval_quarantine_saga
    ON sagacity_approval_quarantine (topic, saga_id);
ALTER TABLE sagacity_approval_request ADD COLUMN IF NOT EXISTS entry_hash text;
-- A seq is an int64 on the wire: the columns hold every one a writer can journal.
ALTER TABLE sagacity_approval_request ALTER COLUMN seq TYPE bigint;
ALTER TABLE sagacity_approval_event ALTER COLUMN seq TYPE bigint;
ALTER TABLE sagacity_attention ALTER COLUMN ended_seq TYPE bigint;
-- What was folded before the acceptance rule is folded again under it: the kept events are
-- dropped and every position goes back to the first offset; open requests are made again from
-- the topic (a request whose events left the topic is materialised from its chain when asked
-- for), closed ones keep their row.
TRUNCATE sagacity_approval_event;
DELETE FROM sagacity_approval_request WHERE state IN ('pending', 'approved');
UPDATE sagacity_approval_offset SET next_offset = 0;
"""
"""Migration 4: tails and quarantine, and the refold under the acceptance rule."""


REFUSED_BY_DATABASE = "refused_by_database"
"""The quarantine kind of an event whose values the database refused (a value out of its
column's range, a key too large for its index): rolled back, kept here with the reason."""

SAGA_LOCK = 0x53474152
"""The first key ("SGAR") of a saga's advisory lock; the second is ``hashtext`` of its topic and
id.  Folding an event and deciding on a request take it before any request row."""


def lock_saga(conn: psycopg.Connection[Any], topic: str, saga_id: str) -> None:
    """Take the saga's advisory lock until ``conn``'s transaction ends (waits for it)."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (SAGA_LOCK, f"{topic}\n{saga_id}")
    )


class Tails:
    """The sagas' tails as one transaction sees them: each read under its saga's lock on first
    use, written back by :meth:`flush` (call it before the transaction commits)."""

    def __init__(self, conn: psycopg.Connection[Any], topic: str) -> None:
        self._conn = conn
        self._topic = topic
        self._read: dict[str, Tail | None] = {}
        self._moved: set[str] = set()

    def get(self, saga_id: str) -> Tail | None:
        """The saga's accepted tail (``None``: none of its events was accepted here)."""
        if saga_id not in self._read:
            lock_saga(self._conn, self._topic, saga_id)
            with self._conn.cursor(row_factory=tuple_row) as cursor:
                record = cursor.execute(
                    """SELECT seq, hash FROM sagacity_approval_tail
                       WHERE topic = %s AND saga_id = %s""",
                    (self._topic, saga_id),
                ).fetchone()
            self._read[saga_id] = None if record is None else Tail(seq=record[0], hash=record[1])
        return self._read[saga_id]

    def mark(self, saga_id: str) -> tuple[Tail | None, bool]:
        """The saga's tail and whether it moved, as :meth:`restore` puts them back (read the
        tail with :meth:`get` first, so its lock is taken outside what may be undone)."""
        return self._read.get(saga_id), saga_id in self._moved

    def restore(self, saga_id: str, mark: tuple[Tail | None, bool]) -> None:
        """Put the saga's tail back as :meth:`mark` saw it (the work since was rolled back)."""
        tail, moved = mark
        self._read[saga_id] = tail
        if moved:
            self._moved.add(saga_id)
        else:
            self._moved.discard(saga_id)

    def advance(self, saga_id: str, entry: JournalEntry) -> None:
        """``entry`` was accepted: it is the saga's tail now."""
        self._read[saga_id] = Tail(seq=entry.seq, hash=entry.hash)
        self._moved.add(saga_id)

    def flush(self) -> None:
        """Write the tails that moved."""
        for saga_id in sorted(self._moved):
            tail = self._read[saga_id]
            assert tail is not None
            self._conn.execute(
                """INSERT INTO sagacity_approval_tail (topic, saga_id, seq, hash)
                   VALUES (%s, %s, %s, %s)
                   ON CONFLICT (topic, saga_id) DO UPDATE
                   SET seq = EXCLUDED.seq, hash = EXCLUDED.hash
                   WHERE sagacity_approval_tail.seq < EXCLUDED.seq""",
                (self._topic, saga_id, tail.seq, tail.hash),
            )
        self._moved.clear()


def quarantine(
    conn: psycopg.Connection[Any],
    topic: str,
    saga_id: str,
    entry: JournalEntry,
    refusal: Refusal | Fault,
    *,
    position: tuple[int, int] | None,
) -> None:
    """Keep a refused event with its reason (once per position of the topic): a
    :class:`~sagacity.chain._acceptance.Refusal` of the acceptance rule, or a :class:`Fault` of the
    message itself."""
    partition, offset = position if position is not None else (None, None)
    conn.execute(
        """INSERT INTO sagacity_approval_quarantine
               (topic, saga_id, seq, event_type, kind, detail, hash, partition, "offset")
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT DO NOTHING""",
        (
            topic,
            saga_id,
            entry.seq,
            entry.event_type.value,
            str(refusal.kind),
            refusal.detail,
            entry.hash,
            partition,
            offset,
        ),
    )


def quarantined(
    conn: psycopg.Connection[Any], topic: str, *, saga_id: str | None, limit: int
) -> list[QuarantinedEvent]:
    """The refused events of ``topic`` (of one saga), oldest first."""
    with conn.cursor(row_factory=tuple_row) as cursor:
        records = cursor.execute(
            """SELECT saga_id, seq, event_type, kind, detail, hash, partition, "offset"
               FROM sagacity_approval_quarantine
               WHERE topic = %s AND (%s::text IS NULL OR saga_id = %s)
               ORDER BY id LIMIT %s""",
            (topic, saga_id, saga_id, limit),
        ).fetchall()
    return [
        QuarantinedEvent(
            saga_id=r[0],
            seq=r[1],
            event_type=r[2],
            kind=r[3],
            detail=r[4],
            entry_hash=r[5],
            partition=r[6],
            offset=r[7],
        )
        for r in records
    ]
