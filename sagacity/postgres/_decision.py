"""A decision's unit of work on the request store (:class:`~sagacity.ports.RequestDecision`):
one transaction holding the saga's advisory lock and the request row's lock.

The approvals service decides inside it: the core reads the chain and appends while the unit
holds the request, and what it journaled is folded before the transaction commits and the
locks go, so the next decider (another replica, a double-clicked button) sees the table
current.  A lock held past the unit's lock timeout is
:class:`~sagacity.errors.DecisionInProgressError` (mapped by the store's connection).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from sagacity.entries._events import JournalEntry
from sagacity.ports import RequestRow
from sagacity.postgres._tails import SAGA_LOCK

if TYPE_CHECKING:
    from sagacity.postgres._requests import PostgresRequestStore


def _first(record: Any) -> Any:
    return record[0] if isinstance(record, tuple | list) else next(iter(record.values()))


class PostgresDecision:
    """:class:`~sagacity.ports.RequestDecision` in one transaction of ``conn``."""

    def __init__(self, store: PostgresRequestStore, conn: psycopg.Connection[Any]) -> None:
        self._store = store
        self._conn = conn

    def get(self, saga_id: str, seq: int, *, lock: bool = False) -> RequestRow | None:
        """The row; ``lock`` takes the saga's lock, then the row's (``FOR UPDATE``)."""
        return self._store.get_in(self._conn, saga_id, seq, lock=lock)

    def lock_open(self, saga_id: str, seq: int) -> bool:
        """Take the saga's lock and the open request's row lock without waiting; ``False``
        when either is held elsewhere or the request is not open."""
        taken = self._conn.execute(
            "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s)) AS taken",
            (SAGA_LOCK, f"{self._store.topic}\n{saga_id}"),
        ).fetchone()
        if taken is None or not _first(taken):
            return False
        locked = self._conn.execute(
            """SELECT 1 FROM sagacity_approval_request
               WHERE topic = %s AND saga_id = %s AND seq = %s
                 AND state IN ('pending', 'approved')
               FOR UPDATE SKIP LOCKED""",
            (self._store.topic, saga_id, seq),
        ).fetchone()
        return locked is not None

    def fold(self, saga_id: str, entries: Sequence[JournalEntry]) -> None:
        """Fold the saga's chain in the unit (:meth:`PostgresRequestStore.apply_chain_in`)."""
        self._store.apply_chain_in(self._conn, saga_id, entries)


@contextmanager
def deciding(
    store: PostgresRequestStore, *, lock_timeout_s: float | None = None
) -> Iterator[PostgresDecision]:
    """``store``'s unit of work for one decision: a transaction, committed when the block
    returns and rolled back when it raises; a lock waited on past ``lock_timeout_s`` raises
    :class:`~sagacity.errors.DecisionInProgressError`."""
    with store.connect() as conn:
        if lock_timeout_s is not None:
            timeout = f"{max(1, int(lock_timeout_s * 1000))}ms"
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(timeout)))
        yield PostgresDecision(store, conn)
