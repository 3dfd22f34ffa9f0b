"""Console sign-in sessions, kept in PostgreSQL so every replica knows them.

Signing in exchanges a bearer token for a random session id in an HttpOnly, SameSite=Strict
cookie.  The database keeps only the SHA-256 of the session id and of the token (never either
secret), the principal's name and the session's CSRF token; the principal is looked up again
from the auth file by the token's hash on every request, so a revoked token ends its sessions.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sagacity.postgres import PostgresRequestStore, migrate

SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_console_session (
    id_sha256     text   PRIMARY KEY,
    token_sha256  text   NOT NULL,
    principal     text   NOT NULL,
    csrf          text   NOT NULL,
    created_at_us bigint NOT NULL,
    expires_at_us bigint NOT NULL
);
"""

COOKIE = "sagacity_session"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Session:
    """A signed-in session (``token_sha256`` finds its principal in the auth file)."""

    token_sha256: str
    principal: str
    csrf: str
    expires_at_us: int


class SessionStore:
    """Sessions on the approvals service's database.

    Args:
        store: the service's store (its connections and error mapping).
        ttl_s: how long a session lasts after sign-in.
    """

    def __init__(self, store: PostgresRequestStore, *, ttl_s: float) -> None:
        self._store = store
        self.ttl_s = ttl_s

    def migrate(self) -> None:
        """Create the table if it does not exist."""
        with self._store.connect() as conn:
            migrate(conn, "sagacity_console_session", ((1, SCHEMA),))

    def create(self, *, token_sha256: str, principal: str, now_us: int) -> tuple[str, Session]:
        """A new session; returns the cookie value (the only copy of the id) and the session."""
        session_id = secrets.token_urlsafe(32)
        session = Session(
            token_sha256=token_sha256,
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            expires_at_us=now_us + int(self.ttl_s * 1_000_000),
        )
        with self._store.connect() as conn:
            conn.execute("DELETE FROM sagacity_console_session WHERE expires_at_us < %s", (now_us,))
            conn.execute(
                """INSERT INTO sagacity_console_session
                   (id_sha256, token_sha256, principal, csrf, created_at_us, expires_at_us)
                   VALUES (%s, %s, %s, %s, %s, %s)""",
                (
                    _digest(session_id),
                    token_sha256,
                    principal,
                    session.csrf,
                    now_us,
                    session.expires_at_us,
                ),
            )
        return session_id, session

    def get(self, session_id: str, *, now_us: int) -> Session | None:
        """The live session with this cookie value (``None``: unknown or expired)."""
        with self._store.connect() as conn:
            record = conn.execute(
                """SELECT token_sha256, principal, csrf, expires_at_us
                   FROM sagacity_console_session WHERE id_sha256 = %s""",
                (_digest(session_id),),
            ).fetchone()
        if record is None or record["expires_at_us"] <= now_us:
            return None
        return Session(
            token_sha256=record["token_sha256"],
            principal=record["principal"],
            csrf=record["csrf"],
            expires_at_us=record["expires_at_us"],
        )

    def delete(self, session_id: str) -> None:
        """End a session (sign out)."""
        with self._store.connect() as conn:
            conn.execute(
                "DELETE FROM sagacity_console_session WHERE id_sha256 = %s",
                (_digest(session_id),),
            )
