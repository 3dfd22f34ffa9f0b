"""Sagas that need a person, folded from the journal into PostgreSQL (the attention queue of
:class:`~sagacity.postgres.PostgresRequestStore`).

A saga enters the queue when a run ends ``COMPENSATION_FAILED`` (a step left dirty, an undo that
failed, a ``SUSPECT`` step) and leaves it when a later run ends in any other final status (its
suspects settled, its undo retried).  Like the request table it is a view of the chain, never
evidence: pages read the saga's chain for the detail.  Rows are keyed by topic, as the request
table's: two topics sharing a database keep separate queues.  Expired requests and refused
resumes are in the request table already (states ``expired`` / ``refused``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.ports import AttentionRow
from sagacity.postgres._migrate import key_by_topic
from sagacity.saga._result import SagaStatus

SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_attention (
    saga_id      text   PRIMARY KEY,
    status       text   NOT NULL,
    detail       text   NOT NULL,
    since_us     bigint NOT NULL,
    ended_seq    integer NOT NULL
);
"""
"""The queue as first made (one topic per database)."""

# Sagas of every topic sharing the database: the queue is keyed by topic.
TOPIC_SCHEMA = key_by_topic("sagacity_attention", "saga_id")
"""The queue keyed by topic (rows made before it are given their topic by the store)."""

_LEAVES = frozenset(
    {
        SagaStatus.COMPLETED.value,
        SagaStatus.COMPENSATED.value,
        SagaStatus.REJECTED.value,
        SagaStatus.EXPIRED.value,
    }
)


def apply_attention(conn: psycopg.Connection[Any], entry: JournalEntry, *, topic: str) -> None:
    """Fold one journal event of ``topic`` into the queue; idempotent (a replay never moves it
    back)."""
    if entry.event_type is not EventType.SAGA_ENDED:
        return
    if entry.result == SagaStatus.COMPENSATION_FAILED.value:
        detail = entry.attributes.get(attr.DIRTY) or entry.error or "compensation failed"
        conn.execute(
            """INSERT INTO sagacity_attention
                   (topic, saga_id, status, detail, since_us, ended_seq)
               VALUES (%s, %s, %s, %s, %s, %s)
               ON CONFLICT (topic, saga_id) DO UPDATE
               SET status = EXCLUDED.status, detail = EXCLUDED.detail,
                   since_us = EXCLUDED.since_us, ended_seq = EXCLUDED.ended_seq
               WHERE sagacity_attention.ended_seq < EXCLUDED.ended_seq""",
            (topic, entry.saga_id, entry.result, detail, entry.recorded_at_us, entry.seq),
        )
    elif entry.result in _LEAVES:
        conn.execute(
            """DELETE FROM sagacity_attention
               WHERE topic = %s AND saga_id = %s AND ended_seq < %s""",
            (topic, entry.saga_id, entry.seq),
        )


def attention_rows(
    conn: psycopg.Connection[Any], *, topic: str, limit: int = 500
) -> list[AttentionRow]:
    """The sagas of ``topic`` in the queue, oldest first."""
    records = conn.execute(
        """SELECT saga_id, status, detail, since_us, ended_seq FROM sagacity_attention
           WHERE topic = %s ORDER BY since_us, saga_id LIMIT %s""",
        (topic, limit),
    ).fetchall()
    return [
        AttentionRow(
            saga_id=r["saga_id"],
            status=r["status"],
            detail=r["detail"],
            since_us=r["since_us"],
            ended_seq=r["ended_seq"],
        )
        for r in records
    ]
