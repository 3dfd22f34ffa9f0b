"""The log of signing rounds on PostgreSQL: the port :class:`~sagacity.ports.RoundLog`
(:class:`PostgresRoundLog`), the rounds (``archive_checkpoint_round``) and their checkpoints
(``archive_checkpoint``) as stored.  Whether a round verifies, and what its leaves hash to, is
the archive service's (``sagacity.consumers.archive``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from sagacity.ports import CheckpointRow, RoundRow
from sagacity.postgres._archive_schema import LOG_VERSION, ROUNDS_VERSION
from sagacity.postgres.archive._db import check_schema, mapped_errors

_COLUMNS = "round_id, leaf_count, root, prev_root, signed_at_us, key_id, signature"


def _select(version: int) -> str:
    log = "format, tree_size, frontier" if version >= LOG_VERSION else "1, NULL, NULL"
    return f"{_COLUMNS}, {log}"


def round_select(version: int, alias: str = "") -> str:
    """The select list of a round as the archive service's ``round_of_row`` reads it, for an
    archive at ``version``."""
    a = f"{alias}." if alias else ""
    log = f"{a}format, {a}tree_size" if version >= LOG_VERSION else "1, NULL::bigint"
    return (
        f"{a}round_id, {a}leaf_count, {a}root, {a}prev_root, {a}signed_at_us, {a}key_id,"
        f" {a}signature, {log}"
    )


def _audit_queries(saga_id: str | None, version: int) -> tuple[str, str]:
    """The rounds in id order (for one saga, its rounds, each with the round before it and
    that round's log columns), and their leaves in round and leaf order."""
    columns = round_select(version, "r")
    if saga_id is None:
        rounds = (
            f"SELECT {columns}, NULL, NULL, NULL, NULL, NULL"  # noqa: S608
            " FROM archive_checkpoint_round r ORDER BY r.round_id"
        )
        scope = ""
    else:
        log_columns = (
            "b.format, b.tree_size, b.frontier" if version >= LOG_VERSION else "1, NULL, NULL"
        )
        # One saga's rounds come with the round before each (whatever sagas it signed), so
        # that their links are checked as the whole-archive pass checks them.
        rounds = (
            f"SELECT {columns}, b.round_id, b.root, {log_columns}"  # noqa: S608
            " FROM archive_checkpoint_round r LEFT JOIN LATERAL (SELECT *"
            " FROM archive_checkpoint_round q WHERE q.round_id < r.round_id"
            " ORDER BY q.round_id DESC LIMIT 1) b ON true WHERE r.round_id IN"
            " (SELECT round_id FROM archive_checkpoint WHERE saga_id = %(s)s)"
            " ORDER BY r.round_id"
        )
        scope = " AND round_id IN (SELECT round_id FROM archive_checkpoint WHERE saga_id = %(s)s)"
    leaves = (
        "SELECT round_id, leaf_index, saga_id, seq, hash, signed_at_us, key_id"  # noqa: S608
        f" FROM archive_checkpoint WHERE round_id IS NOT NULL{scope}"
        " ORDER BY round_id, leaf_index"
    )
    return rounds, leaves


def _fetched(cursor: psycopg.ServerCursor[Any], size: int) -> Iterator[tuple[Any, ...]]:
    """The rows of a named cursor, ``size`` a fetch (psycopg's iteration costs a call into
    its cursor per row; this, one per fetch)."""
    while rows := cursor.fetchmany(size):
        yield from rows


def round_of_row(row: Sequence[Any]) -> RoundRow:
    return RoundRow(
        round_id=int(row[0]),
        leaf_count=int(row[1]),
        root=row[2],
        prev_root=row[3],
        signed_at_us=int(row[4]),
        key_id=row[5],
        signature=row[6],
        format=int(row[7]),
        tree_size=None if row[8] is None else int(row[8]),
        frontier=row[9],
    )


class PostgresRoundLog:
    """The rounds on ``conn`` (the caller's connection, which it closes)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def rounds_after(self, round_id: int, *, limit: int | None) -> list[RoundRow]:
        """The rounds after ``round_id``, oldest first, at most ``limit``."""
        version = check_schema(self._conn)
        if version < ROUNDS_VERSION:
            return []
        with mapped_errors("read signing rounds"):
            rows = self._conn.execute(
                f"SELECT {_select(version)} FROM archive_checkpoint_round"  # noqa: S608
                " WHERE round_id > %s ORDER BY round_id LIMIT %s",
                (round_id, limit),
            ).fetchall()
        return [round_of_row(r) for r in rows]

    def round(self, round_id: int) -> RoundRow | None:
        """One round, or ``None`` when the archive does not hold it."""
        version = check_schema(self._conn)
        if version < ROUNDS_VERSION:
            return None
        with mapped_errors("read a signing round"):
            row = self._conn.execute(
                f"SELECT {_select(version)} FROM archive_checkpoint_round"  # noqa: S608
                " WHERE round_id = %s",
                (round_id,),
            ).fetchone()
        return None if row is None else round_of_row(row)

    def previous_round_id(self, round_id: int) -> int | None:
        """The id of the round before ``round_id``."""
        row = self._conn.execute(
            "SELECT max(round_id) FROM archive_checkpoint_round WHERE round_id < %s", (round_id,)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @contextmanager
    def log_leaves(
        self, *, after: int | None, upto: int, fetch: int = 10_000
    ) -> Iterator[Iterator[tuple[str, int, str]]]:
        """The checkpoints of the rounds ``after`` < round <= ``upto``, in log order, by a
        server-side cursor."""
        if after is None:
            name = "sgc_log_leaves"
            query = (
                "SELECT saga_id, seq, hash FROM archive_checkpoint"
                " WHERE round_id IS NOT NULL AND round_id <= %s ORDER BY round_id, leaf_index"
            )
            params: tuple[int, ...] = (upto,)
        else:
            name = "sgc_log_span"
            query = (
                "SELECT saga_id, seq, hash FROM archive_checkpoint WHERE round_id > %s"
                " AND round_id <= %s ORDER BY round_id, leaf_index"
            )
            params = (after, upto)
        with mapped_errors("read the log of signing rounds"), self._conn.cursor(name=name) as cur:
            cur.itersize = fetch
            cur.execute(query, params)
            yield ((str(s), int(n), str(h)) for s, n, h in cur)

    def round_leaves(self, round_id: int) -> list[tuple[int, str, int, str]]:
        """``(leaf_index, saga_id, seq, hash)`` of the round's checkpoints, by leaf index."""
        rows = self._conn.execute(
            "SELECT leaf_index, saga_id, seq, hash FROM archive_checkpoint WHERE round_id = %s"
            " ORDER BY leaf_index",
            (round_id,),
        ).fetchall()
        return [(int(i), str(s), int(n), str(h)) for i, s, n, h in rows]

    def checkpoints_of(
        self, saga_ids: Collection[str], key_ids: Collection[str]
    ) -> list[CheckpointRow]:
        """The checkpoints of ``saga_ids`` under ``key_ids``, by saga, highest seq first."""
        rows = self._conn.execute(
            "SELECT saga_id, seq, hash, signed_at_us, key_id, signature, round_id, leaf_index"
            " FROM archive_checkpoint WHERE saga_id = ANY(%s) AND key_id = ANY(%s)"
            " ORDER BY saga_id, seq DESC",
            (list(saga_ids), list(key_ids)),
        ).fetchall()
        return [
            CheckpointRow(
                saga_id=saga_id,
                seq=int(seq),
                hash=hash,
                signed_at_us=int(signed_at_us),
                key_id=key_id,
                signature=signature,
                round_id=None if round_id is None else int(round_id),
                leaf_index=None if leaf_index is None else int(leaf_index),
            )
            for saga_id, seq, hash, signed_at_us, key_id, signature, round_id, leaf_index in rows
        ]

    @contextmanager
    def round_streams(
        self, *, saga_id: str | None, fetch: int, version: int
    ) -> Iterator[tuple[Iterator[tuple[Any, ...]], Iterator[tuple[Any, ...]]]]:
        """The rounds and their leaves by two server-side cursors, in the caller's
        transaction."""
        round_query, leaf_query = _audit_queries(saga_id, version)
        with (
            self._conn.cursor(name="sgc_audit_rounds") as round_cur,
            self._conn.cursor(name="sgc_audit_leaves") as leaf_cur,
        ):
            round_cur.itersize = leaf_cur.itersize = fetch
            round_cur.execute(round_query, {"s": saga_id})
            leaf_cur.execute(leaf_query, {"s": saga_id})
            yield _fetched(round_cur, fetch), _fetched(leaf_cur, fetch)

    @contextmanager
    def transaction(self, action: str) -> Iterator[None]:
        """The reads inside it in one transaction."""
        with mapped_errors(action), self._conn.transaction():
            yield
