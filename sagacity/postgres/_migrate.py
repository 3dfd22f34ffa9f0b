"""The one migrations runner: versioned, advisory-locked, safe when many instances start at once.

A component (the archive, the claims, the approvals' tables …) has numbered migrations, each
re-runnable SQL; ``<component>_schema_version`` records the versions applied in the schema of
the connection's ``search_path``.  Every runner of a schema takes one advisory lock (per
schema, whatever the component) for its transaction, so instances starting together apply
each migration once, one after the other, and none fails on a catalog race (``CREATE TABLE IF
NOT EXISTS`` is not safe against a concurrent twin).  A schema already up to date is only read:
a role without the CREATE privilege can start against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from sagacity.errors import PersistenceError
from sagacity.postgres._errors import mapped_errors

MIGRATION_LOCK = 0x53474341
"""The advisory lock's first key ("SGCA"); the second is the schema's ``hashtext``."""


def key_by_topic(table: str, key: str) -> str:
    """SQL giving ``table``, made before its rows recorded their journal topic, a ``topic``
    column ('' for the rows already there) and the primary key ``(topic, key)``: idempotent,
    for a migration of a table whose rows several topics sharing one database would mix.
    ``table`` and ``key`` are the caller's constants, never input."""
    return f"""
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS topic text NOT NULL DEFAULT '';
ALTER TABLE {table} ALTER COLUMN topic DROP DEFAULT;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = '{table}'::regclass AND i.indisprimary
          AND a.attname = 'topic'
    ) THEN
        ALTER TABLE {table} DROP CONSTRAINT {table}_pkey;
        ALTER TABLE {table} ADD PRIMARY KEY (topic, {key});
    END IF;
END $$;
"""  # noqa: S608


def current_schema(conn: psycopg.Connection[Any]) -> str:
    """The schema new objects go to (the first existing schema of the search_path).

    Raises:
        PersistenceError: the search_path names no existing schema.
    """
    with mapped_errors("read the current schema"):
        row = conn.execute("SELECT current_schema()").fetchone()
    value = None if row is None else _first(row)
    if value is None:
        raise PersistenceError("no current schema: the search_path names no existing schema")
    return str(value)


def _version_table(component: str) -> sql.Identifier:
    return sql.Identifier(f"{component}_schema_version")


def applied_versions(conn: psycopg.Connection[Any], component: str) -> set[int]:
    """The versions of ``component`` applied in the current schema (empty when none)."""
    table = f"{component}_schema_version"
    with mapped_errors(f"read the {component} schema version"):
        exists = conn.execute(
            "SELECT to_regclass(format('%%I.%%I', current_schema(), %s::text))", (table,)
        ).fetchone()
        if exists is None or _first(exists) is None:
            return set()
        rows = conn.execute(
            sql.SQL("SELECT version FROM {}").format(_version_table(component))
        ).fetchall()
    return {int(_first(r)) for r in rows}


def _first(row: Any) -> Any:
    return row[0] if isinstance(row, tuple | list) else next(iter(row.values()))


def migrate(
    conn: psycopg.Connection[Any],
    component: str,
    migrations: Sequence[tuple[int, str]],
    *,
    substitutions: Mapping[str, str] | None = None,
    check_first: bool = True,
) -> int:
    """Apply ``component``'s migrations not yet applied; return the version now in place.

    Args:
        conn: an idle connection (the runner commits its own transaction), or one inside the
            caller's transaction (the migration then commits with it).
        component: names the version table (``<component>_schema_version``).
        migrations: ``(version, sql)`` pairs in ascending order; each SQL re-runnable.
        substitutions: placeholders replaced in each SQL text before it runs (the archive's
            ``@schema@``).
        check_first: return without locking or DDL when every migration is applied (a role
            without the CREATE privilege can start); ``False`` always takes the lock and
            creates the version table, as an explicit migration by the schema's owner does.

    Raises:
        PersistenceError: a migration failed (nothing of it stays), or the schema is at a
            version newer than ``migrations`` know.
    """
    known = max((v for v, _ in migrations), default=0)
    ours = not conn.autocommit and conn.info.transaction_status is TransactionStatus.IDLE
    schema = current_schema(conn)
    done = applied_versions(conn, component)
    if ours:  # end the read's implicit transaction: the migration is a transaction of its own
        conn.rollback()
    if done and max(done) > known:
        raise PersistenceError(
            f"{component} schema version {max(done)} is newer than this release understands "
            f"({known})"
        )
    if check_first and all(v in done for v, _ in migrations):
        return max(done, default=0)
    with mapped_errors(f"migrate the {component} schema"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (MIGRATION_LOCK, schema))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(_version_table(component))
        )
        done = {
            int(_first(r))
            for r in conn.execute(
                sql.SQL("SELECT version FROM {}").format(_version_table(component))
            )
        }
        for version, text in migrations:
            if version in done:
                continue
            for placeholder, value in (substitutions or {}).items():
                text = text.replace(placeholder, value)
            conn.execute(text.encode())
            conn.execute(
                sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(_version_table(component)),
                (version,),
            )
            done.add(version)
    return max(done, default=0)
