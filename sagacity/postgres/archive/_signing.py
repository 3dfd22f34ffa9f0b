"""The archive's signing rounds on PostgreSQL: the port
:class:`~sagacity.ports.CheckpointSigning` (:class:`PostgresCheckpointSigning`).  A round's
transaction holds an advisory lock per archive schema, so the rounds of every signer form one
log; what a round signs is the archive service's (``sagacity.consumers.archive``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from sagacity.ports import RoundRow, SignedRoundFields, StoredFinding
from sagacity.postgres.archive._db import mapped_errors
from sagacity.postgres.archive._findings import write_findings
from sagacity.postgres.archive._rounds import PostgresRoundLog, round_of_row

_SIGNING_LOCK = 0x53474352  # with the schema's hash: one signer at a time per archive


def _register_key(conn: psycopg.Connection[Any], key_id: str, public_hex: str) -> None:
    conn.execute(
        "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)"
        " ON CONFLICT (key_id) DO NOTHING",
        (key_id, public_hex),
    )


class _Round:
    """One signing round's transaction on ``conn``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.log = PostgresRoundLog(conn)

    def table_heads(self, saga_ids: Collection[str]) -> dict[str, tuple[int, str]]:
        return {
            s: (int(n), h)
            for s, n, h in self._conn.execute(
                "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
                " WHERE saga_id = ANY(%s) FOR UPDATE",
                (list(saga_ids),),
            )
        }

    def signed_by(self, heads: Sequence[tuple[str, int, str]], key_id: str) -> set[tuple[str, int]]:
        return {
            (s, int(n))
            for s, n in self._conn.execute(
                "SELECT c.saga_id, c.seq FROM archive_checkpoint c"
                " JOIN unnest(%s::text[], %s::bigint[]) AS p(saga_id, seq)"
                " ON c.saga_id = p.saga_id AND c.seq = p.seq WHERE c.key_id = %s",
                ([h[0] for h in heads], [h[1] for h in heads], key_id),
            )
        }

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        write_findings(self._conn.cursor(), findings)

    def last_round(self) -> RoundRow | None:
        row = self._conn.execute(
            "SELECT round_id, leaf_count, root, prev_root, signed_at_us, key_id, signature,"
            " format, tree_size, frontier FROM archive_checkpoint_round"
            " ORDER BY round_id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return round_of_row(row)

    def next_round_id(self) -> int:
        row = self._conn.execute("SELECT nextval('archive_checkpoint_round_id_seq')").fetchone()
        assert row is not None
        return int(row[0])

    def record_round(
        self, signed: SignedRoundFields, *, frontier: str, heads: Sequence[tuple[str, int, str]]
    ) -> None:
        self._conn.execute(
            "INSERT INTO archive_checkpoint_round (round_id, leaf_count, root, prev_root,"
            " signed_at_us, key_id, signature, format, tree_size, frontier)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                signed.round_id,
                signed.leaf_count,
                signed.root,
                signed.prev_root,
                signed.signed_at_us,
                signed.key_id,
                signed.signature,
                signed.format,
                signed.tree_size,
                frontier,
            ),
        )
        with self._conn.cursor().copy(
            "COPY archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id, round_id,"
            " leaf_index) FROM STDIN"
        ) as copy:
            for index, (saga_id, seq, hash) in enumerate(heads):
                copy.write_row(
                    (saga_id, seq, hash, signed.signed_at_us, signed.key_id, signed.round_id, index)
                )
        self._conn.execute(
            "UPDATE archive_saga_head h SET checkpointed_seq = GREATEST(h.checkpointed_seq, u.seq)"
            " FROM unnest(%s::text[], %s::bigint[]) AS u(saga_id, seq)"
            " WHERE h.saga_id = u.saga_id",
            ([h[0] for h in heads], [h[1] for h in heads]),
        )


class PostgresCheckpointSigning:
    """The signing rounds on ``conn`` (the caller's connection, which it closes)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def register_key(self, key_id: str, public_hex: str) -> None:
        """Keep the signing key's public half, in a transaction of its own."""
        with mapped_errors("register the signing key"), self._conn.transaction():
            _register_key(self._conn, key_id, public_hex)

    @contextmanager
    def signing_round(self) -> Iterator[_Round]:
        """A round's transaction under the archive's signing lock, committed on leaving."""
        with mapped_errors("sign archived heads"), self._conn.transaction():
            self._conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_SIGNING_LOCK,)
            )
            yield _Round(self._conn)

    def record_signed_offsets(
        self, consumer_group: str, offsets: Mapping[tuple[str, int], int]
    ) -> None:
        """Move the group's signed offsets up, in a transaction of its own."""
        with mapped_errors("record signed offsets"), self._conn.transaction():
            self._conn.execute(
                "UPDATE archive_consumer_offset o SET signed_offset = GREATEST("
                "coalesce(o.signed_offset, 0), u.signed) FROM unnest(%s::text[], %s::int[],"
                " %s::bigint[]) AS u(topic, kafka_partition, signed)"
                " WHERE o.consumer_group = %s AND o.topic = u.topic"
                " AND o.kafka_partition = u.kafka_partition",
                (
                    [k[0] for k in offsets],
                    [k[1] for k in offsets],
                    list(offsets.values()),
                    consumer_group,
                ),
            )
