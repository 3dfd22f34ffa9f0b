"""Console sign-in sessions, kept in the table the service is handed (the service's
PostgreSQL database: :class:`sagacity.postgres.PostgresConsoleSessions`) so every replica knows
them.

Signing in exchanges a bearer token for a random session id in an HttpOnly, SameSite=Strict
cookie.  The database keeps only the SHA-256 of the session id and of the token (never either
secret), the principal's name and the session's CSRF token; the principal is looked up again
from the auth file by the token's hash on every request, so a revoked token ends its sessions.
"""

from __future__ import annotations

import hashlib
import secrets

from sagacity.ports import ConsoleSession, ConsoleSessionTable

__all__ = ["COOKIE", "Session", "SessionStore"]

Session = ConsoleSession
"""A signed-in session (:class:`~sagacity.ports.ConsoleSession`)."""

COOKIE = "sagacity_session"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class SessionStore:
    """Sessions on the table the service is handed (one database for every replica).

    Args:
        table: where the sessions are kept (:class:`~sagacity.ports.ConsoleSessionTable`).
        ttl_s: how long a session lasts after sign-in.
    """

    def __init__(self, table: ConsoleSessionTable, *, ttl_s: float) -> None:
        self._table = table
        self.ttl_s = ttl_s

    def migrate(self) -> None:
        """Create the table if it does not exist."""
        self._table.migrate()

    def create(self, *, token_sha256: str, principal: str, now_us: int) -> tuple[str, Session]:
        """A new session; returns the cookie value (the only copy of the id) and the session."""
        session_id = secrets.token_urlsafe(32)
        session = Session(
            token_sha256=token_sha256,
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            expires_at_us=now_us + int(self.ttl_s * 1_000_000),
        )
        self._table.insert(_digest(session_id), session, now_us=now_us)
        return session_id, session

    def get(self, session_id: str, *, now_us: int) -> Session | None:
        """The live session with this cookie value (``None``: unknown or expired)."""
        session = self._table.find(_digest(session_id))
        if session is None or session.expires_at_us <= now_us:
            return None
        return session

    def delete(self, session_id: str) -> None:
        """End a session (sign out)."""
        self._table.delete(_digest(session_id))
