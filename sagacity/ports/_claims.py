"""The claim store's port: the compensation service's claims and saga locks
(docs/adr/0007-compensation-exactly-once.md)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class ClaimStatus(enum.StrEnum):
    """Where a claimed step stands."""

    CLAIMED = "CLAIMED"
    COMPENSATED = "COMPENSATED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A step's claim.

    A claim belongs to one journal (the store's, given when it is made) and one step: the
    saga id, the ``EXECUTED`` seq and that entry's hash.  A claim of another journal, or of
    another entry at the same seq, is never this step's.

    Attributes:
        saga_id / step_seq / step_hash: the step (its ``EXECUTED`` seq and entry hash); the
            hash is ``""`` on an ``unbound`` claim.
        status: see :class:`ClaimStatus`.
        attempts: how many times the undo was started.
        result / result_encoding: what the undo returned, once ``COMPENSATED``.
        error: why the undo failed, once ``FAILED`` or ``TIMED_OUT``.
        fresh: this call created the claim (no earlier attempt exists).
        unbound: a claim written before claims named their journal and step (a row the
            claims table held when it was upgraded): it is for this saga id and seq on *some*
            journal, perhaps this step's, perhaps another's.  Its result is never this
            step's; whether its undo may have run is for the caller to weigh.
    """

    saga_id: str
    step_seq: int
    step_hash: str
    status: ClaimStatus
    attempts: int
    result: str | None = None
    result_encoding: str | None = None
    error: str | None = None
    fresh: bool = False
    unbound: bool = False


@runtime_checkable
class ClaimStore(Protocol):
    """The compensation service's memory of what it did to the outside world.

    A store serves one journal: its identity (a non-empty string, given when the store is
    made) is part of every claim's key with the step's saga id, seq and entry hash, so
    journals sharing one database never see each other's claims.  A step is claimed once,
    before its undo is called; a second attempt finds the claim and learns what the first one
    got to.  A saga lock keeps two instances (or threads) from compensating the same saga at
    once; it belongs to the calling thread and is released when the store is closed (or its
    holder dies).  Claims in doubt (``CLAIMED``, ``TIMED_OUT``) are never removed.
    """

    def ensure_schema(self) -> None:
        """Create the store's tables if they do not exist (safe on every start, concurrently).

        Raises:
            PersistenceError: the store could not be reached or refused.
        """
        ...

    def ping(self) -> bool:
        """The store answers."""
        ...

    def try_lock_saga(self, saga_id: str) -> bool:
        """Take the saga's lock for the calling thread without waiting; ``True`` if held.

        Raises:
            PersistenceError: the store failed.
        """
        ...

    def unlock_saga(self, saga_id: str) -> None:
        """Release the saga's lock held by the calling thread."""
        ...

    def claim(self, saga_id: str, step_seq: int, *, step_hash: str, target: str, key: str) -> Claim:
        """Create the step's claim (``fresh``, ``CLAIMED``), or return the existing one.

        When the claim is new but an ``unbound`` claim of the same saga id and seq exists,
        that one is returned (``fresh=False``, ``unbound=True``) and the new claim stays
        ``CLAIMED`` for :meth:`restart`.

        Raises:
            ValueError: ``step_hash`` is not an entry hash (64 lowercase hex).
            PersistenceError: the store failed.
        """
        ...

    def restart(self, saga_id: str, step_seq: int, *, step_hash: str) -> None:
        """Record that the step's undo is being started again (``CLAIMED``, one more attempt)."""
        ...

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
        ...

    def claims(self, saga_id: str) -> list[Claim]:
        """The saga's claims on this store's journal (every step hash) and its ``unbound``
        ones, by step."""
        ...

    def prune(self, *, older_than_s: float, apply: bool) -> int:
        """Delete (with ``apply``; else count) ``COMPENSATED`` and ``FAILED`` claims of this
        store's journal, and ``unbound`` ones, finished over ``older_than_s`` seconds ago.

        Raises:
            PersistenceError: the store failed.
        """
        ...

    def close(self) -> None:
        """Release connections and the saga locks they hold."""
        ...


def check_claim_key(journal: str, step_hash: str | None = None) -> None:
    """Refuse a journal identity or a step hash no claim may be keyed by.

    The empty identity and the empty hash mark ``unbound`` claims (rows older than the key),
    so a store may never write them.

    Raises:
        ValueError: ``journal`` is empty, or ``step_hash`` (when given) is not 64 lowercase
            hex characters.
    """
    if not journal:
        raise ValueError("a claim store needs its journal's identity (a non-empty string)")
    if step_hash is not None and (
        len(step_hash) != 64 or step_hash.strip("0123456789abcdef") != ""
    ):
        raise ValueError(f"a claim's step hash is an entry hash (64 lowercase hex): {step_hash!r}")
