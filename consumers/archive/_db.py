"""Postgres access for the archive: connections, migrations, and the one place psycopg errors
are mapped to :class:`sagacity.errors.PersistenceError`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import sql

from sagacity.consumers.archive._schema import ARCHIVE_TABLES, MIGRATIONS, TABLES_ADDED_IN
from sagacity.errors import ArchiveSchemaError, PersistenceError, PersistenceUnavailableError

ARCHIVER_ROLE = "sagacity_archiver"
"""The role the archiver service should log in as (or be granted): INSERT/SELECT on evidence."""

# Advisory lock key taken while migrating ("SGCA" as an int), scoped by schema name.
_MIGRATION_LOCK = 0x53474341


@contextlib.contextmanager
def mapped_errors(action: str) -> Iterator[None]:
    """Map every psycopg error raised inside the block to a :class:`PersistenceError`.

    Connection losses (and a server shutting down) become
    :class:`PersistenceUnavailableError`, which callers may retry; the psycopg exception is
    kept as ``__cause__``.
    """
    try:
        yield
    except psycopg.OperationalError as exc:
        raise PersistenceUnavailableError(f"{action}: database unavailable: {exc}") from exc
    except psycopg.errors.UndefinedTable as exc:
        raise ArchiveSchemaError(
            f"{action}: no Sagacity archive here ({exc.diag.message_primary}); "
            "check the database URL and search_path, or start the archiver to create it"
        ) from exc
    except psycopg.Error as exc:
        if exc.sqlstate is not None and exc.sqlstate.startswith(("08", "57P")):
            raise PersistenceUnavailableError(f"{action}: database unavailable: {exc}") from exc
        raise PersistenceError(f"{action}: {exc}") from exc


def connect(
    conninfo: str, *, autocommit: bool = False, timeout: float = 10.0
) -> psycopg.Connection:
    """Open a connection (errors mapped); the caller closes it."""
    with mapped_errors("connect to the archive database"):
        return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=int(timeout))


def current_schema(conn: psycopg.Connection) -> str:
    """The schema new objects go to (the first existing schema of the search_path)."""
    with mapped_errors("read the current schema"):
        row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise ArchiveSchemaError("no current schema: the search_path names no existing schema")
    return str(row[0])


def migrate(conn: psycopg.Connection) -> int:
    """Create or upgrade the archive schema; safe to run concurrently and repeatedly.

    Returns the schema version now in place.
    """
    schema = current_schema(conn)
    quoted = sql.Identifier(schema).as_string(conn)
    with mapped_errors("migrate the archive schema"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_MIGRATION_LOCK, schema))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS archive_schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in conn.execute("SELECT version FROM archive_schema_version")}
        for version, text in MIGRATIONS:
            if version in done:
                continue
            conn.execute(text.replace("@schema@", quoted.replace("'", "''")).encode())
            conn.execute("INSERT INTO archive_schema_version (version) VALUES (%s)", (version,))
        row = conn.execute("SELECT max(version) FROM archive_schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


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


def check_schema(conn: psycopg.Connection) -> int:
    """Confirm the connection reaches an archive; return its schema version.

    Raises:
        ArchiveSchemaError: no archive tables in the search_path, or an unknown version.
    """
    schema = current_schema(conn)
    with mapped_errors("inspect the archive schema"):
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
    with mapped_errors("read the archive schema version"):
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


def grant_archiver(conn: psycopg.Connection, role: str = ARCHIVER_ROLE) -> None:
    """Create ``role`` (NOLOGIN) if missing and grant it what the archiver needs, nothing more.

    Evidence tables (journal, quarantine, checkpoints): SELECT and INSERT only.  Working state
    (heads, offsets, keys seen): SELECT, INSERT, UPDATE.  Partitions are created through the
    SECURITY DEFINER function ``sgc_ensure_month``.  Retention (dropping partitions) needs the
    owner and is never granted.
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
        for table in ("archive_retention", "archive_retention_anchor", "archive_schema_version"):
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), ident))
        conn.execute(
            sql.SQL(
                "GRANT USAGE ON SEQUENCE side_effect_journal_archive_id_seq, "
                "archive_quarantine_id_seq, archive_checkpoint_round_id_seq TO {}"
            ).format(ident)
        )
        conn.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION sgc_ensure_month(bigint) TO {}").format(ident)
        )
