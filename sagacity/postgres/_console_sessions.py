"""The console's sign-in sessions in PostgreSQL
(:class:`~sagacity.ports.ConsoleSessionTable`), in the approvals service's database."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from sagacity.ports._console_sessions import ConsoleSession
from sagacity.postgres._connect import table_transaction
from sagacity.postgres._migrate import migrate

COMPONENT = "sagacity_console_session"

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


class PostgresConsoleSessions:
    """Console sessions on the database ``dsn`` names.

    Args:
        dsn: the approvals service's database.
        connect_timeout: seconds to wait for a connection.
    """

    def __init__(self, dsn: str, *, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._timeout = connect_timeout

    def _transaction(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return table_transaction(self._dsn, timeout=self._timeout, row_factory=dict_row)

    def migrate(self) -> None:
        """Create the table if it does not exist."""
        with self._transaction() as conn:
            migrate(conn, COMPONENT, ((1, SCHEMA),))

    def insert(self, id_sha256: str, session: ConsoleSession, *, now_us: int) -> None:
        """Keep ``session``; sessions expired before ``now_us`` go in the same transaction."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM sagacity_console_session WHERE expires_at_us < %s", (now_us,))
            conn.execute(
                """INSERT INTO sagacity_console_session
                   (id_sha256, token_sha256, principal, csrf, created_at_us, expires_at_us)
                   VALUES (%s, %s, %s, %s, %s, %s)""",
                (
                    id_sha256,
                    session.token_sha256,
                    session.principal,
                    session.csrf,
                    now_us,
                    session.expires_at_us,
                ),
            )

    def find(self, id_sha256: str) -> ConsoleSession | None:
        """The session kept under ``id_sha256``, expired or not."""
        with self._transaction() as conn:
            record = conn.execute(
                """SELECT token_sha256, principal, csrf, expires_at_us
                   FROM sagacity_console_session WHERE id_sha256 = %s""",
                (id_sha256,),
            ).fetchone()
        if record is None:
            return None
        return ConsoleSession(
            token_sha256=record["token_sha256"],
            principal=record["principal"],
            csrf=record["csrf"],
            expires_at_us=record["expires_at_us"],
        )

    def delete(self, id_sha256: str) -> None:
        """Remove the session kept under ``id_sha256``."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM sagacity_console_session WHERE id_sha256 = %s", (id_sha256,))
