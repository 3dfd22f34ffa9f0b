"""The archive's database as its readers and its service reach it: errors, schema check and
migrations (the tables are declared in :mod:`sagacity.postgres._archive_schema`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.pq import TransactionStatus

from sagacity.errors import ArchiveSchemaError
from sagacity.postgres._archive_schema import ARCHIVE_TABLES, MIGRATIONS, TABLES_ADDED_IN
from sagacity.postgres._errors import map_error
from sagacity.postgres._migrate import applied_versions, migrate

COMPONENT = "archive"
"""The archive's migrations are recorded in ``archive_schema_version``."""


@contextlib.contextmanager
def archive_errors(action: str) -> Iterator[None]:
    """Map every psycopg error raised inside the block (:mod:`sagacity.postgres._errors`); a
    missing table says the connection reaches no archive (:class:`ArchiveSchemaError`)."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise ArchiveSchemaError(
            f"{action}: no Sagacity archive here ({exc.diag.message_primary}); "
            "check the database URL and search_path, or start the archiver to create it"
        ) from exc
    except psycopg.Error as exc:
        raise map_error(exc, action) from exc


def current_schema(conn: psycopg.Connection[Any]) -> str:
    """The schema new objects go to (the first existing schema of the search_path).

    Raises:
        ArchiveSchemaError: the search_path names no existing schema.
    """
    with archive_errors("read the current schema"):
        row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise ArchiveSchemaError("no current schema: the search_path names no existing schema")
    return str(row[0])


def migrate_archive(conn: psycopg.Connection[Any]) -> int:
    """Create or upgrade the archive schema; safe to run concurrently and repeatedly.

    It always takes the migration lock and needs the schema owner's privileges (starting
    services check the schema first: ``ensure_schema``).

    Returns the schema version now in place.

    Raises:
        ArchiveSchemaError: the archive is newer than this release, or no schema is current.
    """
    idle = not conn.autocommit and conn.info.transaction_status is TransactionStatus.IDLE
    quoted = sql.Identifier(current_schema(conn)).as_string(conn)
    done = applied_versions(conn, COMPONENT)
    if idle:  # the reads' implicit transaction ends here; the runner opens its own
        conn.rollback()
    known = max(v for v, _ in MIGRATIONS)
    if done and max(done) > known:
        raise ArchiveSchemaError(
            f"archive schema version {max(done)} is newer than this release understands ({known})"
        )
    # The placeholder also stands inside SQL string literals: quotes doubled.
    substitutions = {"@schema@": quoted.replace("'", "''")}
    return migrate(conn, COMPONENT, MIGRATIONS, substitutions=substitutions, check_first=False)


def check_schema(conn: psycopg.Connection[Any]) -> int:
    """Confirm the connection reaches an archive; return its schema version.

    Raises:
        ArchiveSchemaError: no archive tables in the search_path, or an unknown version.
    """
    schema = current_schema(conn)
    with archive_errors("inspect the archive schema"):
        found = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s",
                (schema,),
            )
        }
    base = [t for t in ARCHIVE_TABLES if t not in TABLES_ADDED_IN]
    missing = [t for t in (*base, "archive_schema_version") if t not in found]
    if missing:
        raise ArchiveSchemaError(
            f"schema {schema!r} is not a Sagacity archive (missing: {', '.join(missing)}); "
            "check the database URL and search_path"
        )
    with archive_errors("read the archive schema version"):
        row = conn.execute("SELECT max(version) FROM archive_schema_version").fetchone()
    version = int(row[0]) if row and row[0] is not None else 0
    # An archive not yet migrated to a later version is still read (an auditor's verify).
    missing = [t for t, v in TABLES_ADDED_IN.items() if v <= version and t not in found]
    if missing:
        raise ArchiveSchemaError(
            f"archive schema {schema!r} is at version {version} but lacks {', '.join(missing)}"
        )
    known = max(v for v, _ in MIGRATIONS)
    if version > known:
        raise ArchiveSchemaError(
            f"archive schema version {version} is newer than this release understands ({known})"
        )
    return version
