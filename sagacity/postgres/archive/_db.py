"""Postgres access for the archive: connections, migrations and the archiver's role.

Errors, the schema check and the migrations are the Postgres adapter's
(:mod:`sagacity.postgres._archive`): a lost connection, a serialization failure or a deadlock
raise :class:`~sagacity.errors.PersistenceUnavailableError` (retryable), a missing table
:class:`~sagacity.errors.ArchiveSchemaError`."""

from __future__ import annotations

import psycopg
from psycopg import sql

from sagacity.errors import ArchiveSchemaError
from sagacity.postgres import connect as connect_database
from sagacity.postgres._archive import archive_errors as mapped_errors
from sagacity.postgres._archive import check_schema, current_schema, migrate_archive
from sagacity.postgres._archive_schema import MIGRATIONS

__all__ = [
    "ARCHIVER_ROLE",
    "check_schema",
    "connect",
    "current_schema",
    "ensure_schema",
    "grant_archiver",
    "mapped_errors",
    "migrate",
]

ARCHIVER_ROLE = "sagacity_archiver"
"""The role the archiver service should log in as (or be granted): INSERT/SELECT on evidence."""


def connect(
    conninfo: str, *, autocommit: bool = False, timeout: float = 10.0
) -> psycopg.Connection:
    """Open a connection (errors mapped); the caller closes it."""
    return connect_database(
        conninfo, autocommit=autocommit, timeout=timeout, action="connect to the archive database"
    )


def migrate(conn: psycopg.Connection) -> int:
    """Create or upgrade the archive schema; safe to run concurrently and repeatedly
    (the migrations runner of :mod:`sagacity.postgres`).

    Returns the schema version now in place.
    """
    return migrate_archive(conn)


def ensure_schema(conn: psycopg.Connection) -> int:
    """Migrate only if the archive is missing or older than this release.

    A service running as the archiver role (no CREATE privilege) can start against an archive
    its owner already migrated.
    """
    latest = max(v for v, _ in MIGRATIONS)
    try:
        version = check_schema(conn)
    except ArchiveSchemaError:
        version = -1
    finally:
        if not conn.autocommit:
            conn.rollback()
    if version == latest:
        return version
    migrate(conn)
    return check_schema(conn)  # refuses an archive newer than this release


def grant_archiver(conn: psycopg.Connection, role: str = ARCHIVER_ROLE) -> None:
    """Create ``role`` (NOLOGIN) if missing and grant it what the archiver needs, nothing more.

    Evidence tables (journal, quarantine, checkpoints, findings): SELECT and INSERT only.
    Working state (heads, offsets, keys seen): SELECT, INSERT, UPDATE.  Partitions are created
    through the SECURITY DEFINER function ``sgc_ensure_month``.  Retention (dropping
    partitions) needs the owner and is never granted.
    """
    schema = current_schema(conn)
    ident = sql.Identifier(role)
    with mapped_errors("grant the archiver role"), conn.transaction():
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(ident))
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
        )
        for table in (
            "side_effect_journal",
            "archive_quarantine",
            "archive_checkpoint",
            "archive_checkpoint_round",
            "archive_finding",
        ):
            conn.execute(
                sql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(sql.Identifier(table), ident)
            )
        for table in ("archive_saga_head", "archive_consumer_offset", "archive_signing_key"):
            conn.execute(
                sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {}").format(
                    sql.Identifier(table), ident
                )
            )
        for table in (
            "archive_retention",
            "archive_retention_anchor",
            "archive_erasure",
            "archive_schema_version",
        ):
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), ident))
        conn.execute(
            sql.SQL(
                "GRANT USAGE ON SEQUENCE side_effect_journal_archive_id_seq, "
                "archive_quarantine_id_seq, archive_checkpoint_round_id_seq, "
                "archive_finding_id_seq TO {}"
            ).format(ident)
        )
        conn.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION sgc_ensure_month(bigint) TO {}").format(ident)
        )
