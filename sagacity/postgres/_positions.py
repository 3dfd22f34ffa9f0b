"""Consumer positions kept in Postgres, written in the same transaction as the effects.

A consumer that stores its next offset per partition with the rows a batch produced neither
loses nor applies twice an event across a restart or a rebalance: on assignment it starts
from :func:`positions`, after a batch it calls :func:`store_positions` in the batch's
transaction.  Positions only move forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from sagacity.postgres._errors import mapped_errors
from sagacity.postgres._migrate import migrate

COMPONENT = "sagacity_position"

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE IF NOT EXISTS sagacity_consumer_position (
    consumer    text    NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);
""",
    ),
)
"""The positions table's migrations."""


def ensure_positions(conn: psycopg.Connection[Any]) -> None:
    """Create the positions table if missing (safe when many instances start at once)."""
    migrate(conn, COMPONENT, MIGRATIONS)


def positions(conn: psycopg.Connection[Any], consumer: str, topic: str) -> dict[int, int]:
    """The next offset to read per partition of ``topic`` for ``consumer`` (its group)."""
    with mapped_errors("read consumer positions"):
        rows = conn.execute(
            "SELECT partition, next_offset FROM sagacity_consumer_position"
            " WHERE consumer = %s AND topic = %s",
            (consumer, topic),
        ).fetchall()
    return {int(_at(r, 0)): int(_at(r, 1)) for r in rows}


def store_positions(
    conn: psycopg.Connection[Any], consumer: str, topic: str, next_offsets: Mapping[int, int]
) -> None:
    """Record ``consumer``'s next offset per partition, in ``conn``'s transaction; a position
    never moves back (a late batch of a former owner cannot rewind it).

    Raises:
        ValueError: an offset is negative.
    """
    bad = {p: o for p, o in next_offsets.items() if o < 0}
    if bad:
        raise ValueError(f"a consumer position is a non-negative offset, not {bad}")
    with mapped_errors("store consumer positions"):
        for partition, next_offset in sorted(next_offsets.items()):
            conn.execute(
                "INSERT INTO sagacity_consumer_position (consumer, topic, partition, next_offset)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (consumer, topic, partition) DO UPDATE"
                " SET next_offset = GREATEST(sagacity_consumer_position.next_offset,"
                " EXCLUDED.next_offset), updated_at = now()",
                (consumer, topic, partition, next_offset),
            )


def _at(row: Any, index: int) -> Any:
    return row[index] if isinstance(row, tuple | list) else list(row.values())[index]
