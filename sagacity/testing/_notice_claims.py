"""An in-memory :class:`~sagacity.ports.NoticeClaims`, for tests."""

from __future__ import annotations

import threading


class InMemoryNoticeClaims:
    """Notice claims in a set (one process only)."""

    def __init__(self) -> None:
        self._claimed: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def migrate(self) -> None:
        """Nothing to create."""

    def claim(self, kind: str, saga_id: str, seq: int, *, now_us: int) -> bool:
        """``True`` for the first claim of this notice only."""
        with self._lock:
            if (kind, saga_id, seq) in self._claimed:
                return False
            self._claimed.add((kind, saga_id, seq))
            return True
