"""What the approvals service's Slack integration keeps in PostgreSQL, shared by every replica
(:class:`~sagacity.ports.SlackTables`).

``sagacity_slack_message``: one row per request posted (claimed before the post, so two
replicas never post the same request twice), with the message's channel and ``ts`` once Slack
answered, and whether the message has been rewritten with the request's outcome.

``sagacity_slack_seen``: the signature of every interactivity body accepted in the last
minutes.  Slack signs ``v0:{timestamp}:{body}``, so a replayed body carries the same signature:
the first replica to insert it acts, every later arrival is refused, on any replica.  Rows older
than the timestamp window are pruned as new ones arrive (a body that old is refused by its
timestamp anyway).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from sagacity.ports._slack_tables import SlackMessage
from sagacity.postgres._connect import table_transaction
from sagacity.postgres._migrate import migrate

COMPONENT = "sagacity_slack"
MIGRATIONS = (
    (
        1,
        """
CREATE TABLE IF NOT EXISTS sagacity_slack_message (
    saga_id      text    NOT NULL,
    seq          integer NOT NULL,
    channel      text,
    ts           text,
    claimed_at_us bigint NOT NULL,
    settled      boolean NOT NULL DEFAULT false,
    PRIMARY KEY (saga_id, seq)
);
CREATE TABLE IF NOT EXISTS sagacity_slack_seen (
    signature    text   PRIMARY KEY,
    request_ts   bigint NOT NULL,
    seen_at_us   bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS sagacity_slack_seen_ts ON sagacity_slack_seen (request_ts);
""",
    ),
)


class PostgresSlackTables:
    """The Slack tables on the approvals service's database.

    Args:
        dsn: the approvals service's database.
        connect_timeout: seconds to wait for a connection.
    """

    def __init__(self, dsn: str, *, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._timeout = connect_timeout

    def _connect(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return table_transaction(self._dsn, timeout=self._timeout, row_factory=dict_row)

    def migrate(self) -> None:
        """Create the tables if they do not exist."""
        with self._connect() as conn:
            migrate(conn, COMPONENT, MIGRATIONS)

    # -- messages ---------------------------------------------------------------------------
    def claim(self, saga_id: str, seq: int, *, now_us: int) -> bool:
        """Claim the posting of the request at ``saga_id``/``seq``; ``False``: already claimed."""
        with self._connect() as conn:
            claimed = conn.execute(
                """INSERT INTO sagacity_slack_message (saga_id, seq, claimed_at_us)
                   VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1""",
                (saga_id, seq, now_us),
            ).fetchone()
        return claimed is not None

    def release(self, saga_id: str, seq: int) -> None:
        """Give up a claim whose post failed, so a later scan posts again."""
        with self._connect() as conn:
            conn.execute(
                "DELETE FROM sagacity_slack_message WHERE saga_id = %s AND seq = %s AND ts IS NULL",
                (saga_id, seq),
            )

    def posted(self, saga_id: str, seq: int, *, channel: str, ts: str) -> None:
        """Record where the request's message is."""
        with self._connect() as conn:
            conn.execute(
                """UPDATE sagacity_slack_message SET channel = %s, ts = %s
                   WHERE saga_id = %s AND seq = %s""",
                (channel, ts, saga_id, seq),
            )

    def message(self, saga_id: str, seq: int) -> SlackMessage | None:
        """The request's message, if it was posted."""
        with self._connect() as conn:
            row = conn.execute(
                """SELECT saga_id, seq, channel, ts FROM sagacity_slack_message
                   WHERE saga_id = %s AND seq = %s AND ts IS NOT NULL""",
                (saga_id, seq),
            ).fetchone()
        return None if row is None else _posted(row)

    def unsettled(self, limit: int = 500) -> list[SlackMessage]:
        """Messages not yet rewritten with their request's outcome, oldest first."""
        with self._connect() as conn:
            rows = conn.execute(
                """SELECT saga_id, seq, channel, ts FROM sagacity_slack_message
                   WHERE NOT settled AND ts IS NOT NULL ORDER BY claimed_at_us LIMIT %s""",
                (limit,),
            ).fetchall()
        return [_posted(row) for row in rows]

    def settle(self, saga_id: str, seq: int) -> None:
        """Mark the request's message as rewritten with its outcome."""
        with self._connect() as conn:
            conn.execute(
                "UPDATE sagacity_slack_message SET settled = true WHERE saga_id = %s AND seq = %s",
                (saga_id, seq),
            )

    # -- replays ----------------------------------------------------------------------------
    def first_sight(self, signature: str, *, request_ts: int, now_us: int, keep_s: int) -> bool:
        """Record an accepted body's signature; ``False`` when it was seen before (a replay).

        Args:
            signature: the body's ``X-Slack-Signature``.
            request_ts: its ``X-Slack-Request-Timestamp`` (seconds).
            now_us: the service's clock.
            keep_s: how long a signature is remembered (at least the timestamp window).
        """
        with self._connect() as conn:
            conn.execute(
                "DELETE FROM sagacity_slack_seen WHERE request_ts < %s",
                (now_us // 1_000_000 - keep_s,),
            )
            fresh = conn.execute(
                """INSERT INTO sagacity_slack_seen (signature, request_ts, seen_at_us)
                   VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1""",
                (signature, request_ts, now_us),
            ).fetchone()
        return fresh is not None


def _posted(row: dict[str, object]) -> SlackMessage:
    return SlackMessage(
        saga_id=str(row["saga_id"]),
        seq=int(str(row["seq"])),
        channel=str(row["channel"]),
        ts=str(row["ts"]),
    )
