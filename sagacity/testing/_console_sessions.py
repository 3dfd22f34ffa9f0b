"""An in-memory :class:`~sagacity.ports.ConsoleSessionTable`, for tests."""

from __future__ import annotations

import threading

from sagacity.ports._console_sessions import ConsoleSession


class InMemoryConsoleSessions:
    """Console sessions in a dict (one process only)."""

    def __init__(self) -> None:
        self._rows: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def migrate(self) -> None:
        """Nothing to create."""

    def insert(self, id_sha256: str, session: ConsoleSession, *, now_us: int) -> None:
        """Keep ``session``; sessions expired before ``now_us`` are removed."""
        with self._lock:
            for key in [k for k, s in self._rows.items() if s.expires_at_us < now_us]:
                del self._rows[key]
            self._rows[id_sha256] = session

    def find(self, id_sha256: str) -> ConsoleSession | None:
        """The session kept under ``id_sha256``, expired or not."""
        with self._lock:
            return self._rows.get(id_sha256)

    def delete(self, id_sha256: str) -> None:
        """Remove the session kept under ``id_sha256``."""
        with self._lock:
            self._rows.pop(id_sha256, None)
