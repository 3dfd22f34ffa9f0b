"""The notifier's claims in PostgreSQL (:class:`~sagacity.ports.NoticeClaims`), in the
approvals service's database."""

from __future__ import annotations

from sagacity.postgres._connect import table_transaction
from sagacity.postgres._migrate import migrate

COMPONENT = "sagacity_console_notice"

SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_console_notice (
    kind       text    NOT NULL,
    saga_id    text    NOT NULL,
    seq        integer NOT NULL,
    noticed_at_us bigint NOT NULL,
    PRIMARY KEY (kind, saga_id, seq)
);
"""


class PostgresNoticeClaims:
    """Notice claims on the database ``dsn`` names.

    Args:
        dsn: the approvals service's database.
        connect_timeout: seconds to wait for a connection.
    """

    def __init__(self, dsn: str, *, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._timeout = connect_timeout

    def migrate(self) -> None:
        """Create the table if it does not exist."""
        with table_transaction(self._dsn, timeout=self._timeout) as conn:
            migrate(conn, COMPONENT, ((1, SCHEMA),))

    def claim(self, kind: str, saga_id: str, seq: int, *, now_us: int) -> bool:
        """``True`` for the first claim of this notice only."""
        with table_transaction(self._dsn, timeout=self._timeout) as conn:
            claimed = conn.execute(
                """INSERT INTO sagacity_console_notice (kind, saga_id, seq, noticed_at_us)
                   VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1""",
                (kind, saga_id, seq, now_us),
            ).fetchone()
        return claimed is not None
