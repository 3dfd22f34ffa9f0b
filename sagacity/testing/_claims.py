"""The compensation claims in memory: :class:`~sagacity.ports.ClaimStore` for tests."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

from sagacity.ports import Claim, ClaimStatus


@dataclass
class _Row:
    target: str
    key: str
    instance: str
    status: ClaimStatus
    attempts: int = 1
    result: str | None = None
    result_encoding: str | None = None
    error: str | None = None
    finished_at: float | None = None


class InMemoryClaimStore:
    """Claims and saga locks in process memory; safe under threads.

    A saga lock belongs to the thread that took it (as a Postgres session lock belongs to the
    thread's connection); taking it again on the same thread succeeds and needs as many
    unlocks.  :meth:`close` releases every lock; claims stay.

    Args:
        instance: this instance's id, recorded on claims.
    """

    def __init__(self, *, instance: str = "memory") -> None:
        self._instance = instance
        self._rows: dict[tuple[str, int], _Row] = {}
        self._locks: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def ensure_schema(self) -> None:
        """Nothing to create."""

    def ping(self) -> bool:
        """Always answers."""
        return True

    def try_lock_saga(self, saga_id: str) -> bool:
        """Take the saga's lock for the calling thread without waiting; ``True`` if held."""
        me = threading.get_ident()
        with self._lock:
            holder, depth = self._locks.get(saga_id, (me, 0))
            if holder != me:
                return False
            self._locks[saga_id] = (me, depth + 1)
            return True

    def unlock_saga(self, saga_id: str) -> None:
        """Release the saga's lock held by the calling thread (nothing if it holds none)."""
        me = threading.get_ident()
        with self._lock:
            holder, depth = self._locks.get(saga_id, (me, 0))
            if holder != me or depth == 0:
                return
            if depth == 1:
                del self._locks[saga_id]
            else:
                self._locks[saga_id] = (me, depth - 1)

    def claim(self, saga_id: str, step_seq: int, *, target: str, key: str) -> Claim:
        """Create the step's claim (``fresh``), or return the existing one."""
        with self._lock:
            row = self._rows.get((saga_id, step_seq))
            if row is None:
                self._rows[(saga_id, step_seq)] = _Row(
                    target=target, key=key, instance=self._instance, status=ClaimStatus.CLAIMED
                )
                return Claim(
                    saga_id=saga_id,
                    step_seq=step_seq,
                    status=ClaimStatus.CLAIMED,
                    attempts=1,
                    fresh=True,
                )
            return Claim(
                saga_id=saga_id,
                step_seq=step_seq,
                status=row.status,
                attempts=row.attempts,
                result=row.result,
                result_encoding=row.result_encoding,
            )

    def restart(self, saga_id: str, step_seq: int) -> None:
        """Record that the step's undo is being started again."""
        with self._lock:
            row = self._rows.get((saga_id, step_seq))
            if row is not None:
                row.attempts += 1
                row.status = ClaimStatus.CLAIMED
                row.instance = self._instance
                row.error = None

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
        with self._lock:
            row = self._rows.get((saga_id, step_seq))
            if row is not None:
                row.status = ClaimStatus(status)
                row.result, row.result_encoding, row.error = result, result_encoding, error
                row.finished_at = time.time()

    def claims(self, saga_id: str) -> list[Claim]:
        """Every claim of the saga, by step."""
        with self._lock:
            found = sorted(
                (
                    (seq, dataclasses.replace(row))
                    for (s, seq), row in self._rows.items()
                    if s == saga_id
                ),
                key=lambda pair: pair[0],
            )
        return [
            Claim(
                saga_id=saga_id,
                step_seq=seq,
                status=row.status,
                attempts=row.attempts,
                result=row.result,
                result_encoding=row.result_encoding,
                error=row.error,
            )
            for seq, row in found
        ]

    def prune(self, *, older_than_s: float, apply: bool) -> int:
        """Delete (with ``apply``; else count) ``COMPENSATED`` and ``FAILED`` claims finished
        over ``older_than_s`` seconds ago."""
        cutoff = time.time() - older_than_s
        with self._lock:
            old = [
                key
                for key, row in self._rows.items()
                if row.status in (ClaimStatus.COMPENSATED, ClaimStatus.FAILED)
                and row.finished_at is not None
                and row.finished_at < cutoff
            ]
            if apply:
                for key in old:
                    del self._rows[key]
        return len(old)

    def close(self) -> None:
        """Release every saga lock; claims stay."""
        with self._lock:
            self._locks.clear()
