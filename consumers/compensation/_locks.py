"""One lock per saga among an instance's jobs (the saga's lock across instances is Postgres's).

A saga's lock is forgotten only when no job holds or waits for it: a job arriving while
another waits finds the same lock, never a fresh one beside it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class _Held:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    """Jobs holding or waiting for :attr:`lock`."""


class SagaLocks:
    """The per-saga locks of one service instance."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        """Sagas whose lock is held or waited for."""
        with self._guard:
            return len(self._held)

    @contextlib.contextmanager
    def hold(self, saga_id: str) -> Iterator[None]:
        """Hold ``saga_id``'s lock for the block (waiting for the job that holds it)."""
        with self._guard:
            held = self._held.get(saga_id)
            if held is None:
                held = self._held[saga_id] = _Held()
            held.users += 1
        try:
            with held.lock:
                yield
        finally:
            with self._guard:
                held.users -= 1
                if held.users == 0:
                    del self._held[saga_id]
