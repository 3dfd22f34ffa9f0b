"""The console's sign-in sessions as a table keeps them: :class:`ConsoleSessionTable`.

The console (``sagacity.consumers.approvals.console``) makes the secrets and judges expiry;
the table only keeps rows keyed by the SHA-256 of a session id (never the id itself, nor the
bearer token), so every replica of the approvals service knows every session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class ConsoleSession:
    """A signed-in session (``token_sha256`` finds its principal in the auth file)."""

    token_sha256: str
    principal: str
    csrf: str
    expires_at_us: int


@runtime_checkable
class ConsoleSessionTable(Protocol):
    """Where the console keeps its sessions."""

    def migrate(self) -> None:
        """Create the table if it does not exist (safe on every start)."""
        ...

    def insert(self, id_sha256: str, session: ConsoleSession, *, now_us: int) -> None:
        """Keep ``session`` under ``id_sha256``, made at ``now_us``; sessions that expired
        before ``now_us`` are removed in the same transaction."""
        ...

    def find(self, id_sha256: str) -> ConsoleSession | None:
        """The session kept under ``id_sha256``, expired or not (``None``: none kept)."""
        ...

    def delete(self, id_sha256: str) -> None:
        """Remove the session kept under ``id_sha256`` (none kept: nothing happens)."""
        ...
