"""The compensation claims in memory: :class:`~sagacity.ports.ClaimStore` for tests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from sagacity.ports import Claim, ClaimStatus, check_claim_key

_Key = tuple[str, str, int, str]
"""A claim's key: (journal, saga id, step seq, step hash); ``("", saga, seq, "")`` unbound."""


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


@dataclass
class _Database:
    """What stores sharing one memory share (as stores on one Postgres database do)."""

    rows: dict[_Key, _Row] = field(default_factory=dict)
    locks: dict[str, tuple[tuple[int, int], int]] = field(default_factory=dict)
    """Per saga id: its holder (the store and the thread: a Postgres session) and depth."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class InMemoryClaimStore:
    """Claims of one journal and saga locks in process memory; safe under threads.

    A saga lock belongs to the store and thread that took it (as a Postgres session lock
    belongs to the thread's connection); taking it again on the same thread succeeds and needs
    as many unlocks.  :meth:`close` releases the store's locks; claims stay.

    Args:
        instance: this instance's id, recorded on claims.
        journal: the journal's identity, part of every claim's key.
        sharing: another store whose memory this one shares (a second journal on the same
            database); ``None``: a memory of its own.

    Raises:
        ValueError: ``journal`` is empty.
    """

    def __init__(
        self,
        *,
        instance: str = "memory",
        journal: str = "memory",
        sharing: InMemoryClaimStore | None = None,
    ) -> None:
        check_claim_key(journal)
        self._instance = instance
        self._journal = journal
        self._db: _Database = _Database() if sharing is None else sharing._db

    @property
    def journal(self) -> str:
        """The journal whose claims this store keeps."""
        return self._journal

    def add_unbound(self, saga_id: str, step_seq: int, status: ClaimStatus) -> None:
        """Put a claim written before claims named their journal and step (as the claims
        table holds after its upgrade), for tests of what a store does with one."""
        with self._db.lock:
            self._db.rows[("", saga_id, step_seq, "")] = _Row(
                target="undo",
                key=f"{saga_id}:{step_seq}",
                instance="previous-release",
                status=status,
                result="from an older release" if status is ClaimStatus.COMPENSATED else None,
                result_encoding="text" if status is ClaimStatus.COMPENSATED else None,
                finished_at=None if status is ClaimStatus.CLAIMED else time.time(),
            )

    def ensure_schema(self) -> None:
        """Nothing to create."""

    def ping(self) -> bool:
        """Always answers."""
        return True

    def try_lock_saga(self, saga_id: str) -> bool:
        """Take the saga's lock for the calling thread without waiting; ``True`` if held."""
        me = (id(self), threading.get_ident())
        with self._db.lock:
            holder, depth = self._db.locks.get(saga_id, (me, 0))
            if holder != me:
                return False
            self._db.locks[saga_id] = (me, depth + 1)
            return True

    def unlock_saga(self, saga_id: str) -> None:
        """Release the saga's lock held by the calling thread (nothing if it holds none)."""
        me = (id(self), threading.get_ident())
        with self._db.lock:
            holder, depth = self._db.locks.get(saga_id, (me, 0))
            if holder != me or depth == 0:
                return
            if depth == 1:
                del self._db.locks[saga_id]
            else:
                self._db.locks[saga_id] = (me, depth - 1)

    def claim(self, saga_id: str, step_seq: int, *, step_hash: str, target: str, key: str) -> Claim:
        """Create the step's claim (``fresh``), or return the existing one (an unbound one of
        the saga id and seq when the step's own is new)."""
        check_claim_key(self._journal, step_hash)
        mine: _Key = (self._journal, saga_id, step_seq, step_hash)
        with self._db.lock:
            row = self._db.rows.get(mine)
            if row is not None:
                return _claim(mine, row)
            self._db.rows[mine] = _Row(
                target=target, key=key, instance=self._instance, status=ClaimStatus.CLAIMED
            )
            unbound: _Key = ("", saga_id, step_seq, "")
            old = self._db.rows.get(unbound)
            if old is not None:
                return _claim(unbound, old)
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
        with self._db.lock:
            row = self._db.rows.get((self._journal, saga_id, step_seq, step_hash))
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
        step_hash: str,
        result: str | None = None,
        result_encoding: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record how the step's undo ended."""
        with self._db.lock:
            row = self._db.rows.get((self._journal, saga_id, step_seq, step_hash))
            if row is not None:
                row.status = ClaimStatus(status)
                row.result, row.result_encoding, row.error = result, result_encoding, error
                row.finished_at = time.time()

    def claims(self, saga_id: str) -> list[Claim]:
        """The saga's claims on this journal and its unbound ones, by step."""
        with self._db.lock:
            found = [
                _claim(key, row)
                for key, row in self._db.rows.items()
                if key[0] in (self._journal, "") and key[1] == saga_id
            ]
        return sorted(found, key=lambda c: (c.step_seq, not c.unbound, c.step_hash))

    def prune(self, *, older_than_s: float, apply: bool) -> int:
        """Delete (with ``apply``; else count) this journal's and unbound ``COMPENSATED`` and
        ``FAILED`` claims finished over ``older_than_s`` seconds ago."""
        cutoff = time.time() - older_than_s
        with self._db.lock:
            old = [
                key
                for key, row in self._db.rows.items()
                if key[0] in (self._journal, "")
                and row.status in (ClaimStatus.COMPENSATED, ClaimStatus.FAILED)
                and row.finished_at is not None
                and row.finished_at < cutoff
            ]
            if apply:
                for key in old:
                    del self._db.rows[key]
        return len(old)

    def close(self) -> None:
        """Release every saga lock the store holds; claims stay."""
        with self._db.lock:
            for saga_id, (holder, _depth) in list(self._db.locks.items()):
                if holder[0] == id(self):
                    del self._db.locks[saga_id]


def _claim(key: _Key, row: _Row) -> Claim:
    journal, saga_id, step_seq, step_hash = key
    unbound = journal == ""
    return Claim(
        saga_id=saga_id,
        step_seq=step_seq,
        step_hash=step_hash,
        status=row.status,
        attempts=row.attempts,
        # An unbound claim's result may be another journal's: never handed over as a step's.
        result=None if unbound else row.result,
        result_encoding=None if unbound else row.result_encoding,
        error=row.error,
        unbound=unbound,
    )
