"""Column statistics after an erasure: ``ANALYZE`` of the columns it cleared.

PostgreSQL samples column values into its statistics (``pg_stats``: most common values,
histogram bounds) and keeps them until the next ``ANALYZE``: an erased value frequent enough
to be sampled stays readable there (to any role that may read the table's statistics) after
its rows were cleared.  :func:`refresh_statistics` re-samples exactly the columns an erasure
clears, in the archive (``sgc_erase_saga``) and in the services' tables
(:func:`sagacity.postgres._erasure.clear_service_copies`); a partitioned table's partitions
are re-sampled with it.

Only a table's owner (or a superuser; from PostgreSQL 17 a role granted ``MAINTAIN``) may
``ANALYZE`` it: PostgreSQL skips a table it may not analyze with a warning, which is reported
(logged, and returned), never fatal: the erasure itself is done by then.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg.errors import Diagnostic

from sagacity.errors import PersistenceError
from sagacity.postgres._connect import connect
from sagacity.postgres._erasure import table_exists

log = logging.getLogger("sagacity.erasure")

ARCHIVE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "side_effect_journal": ("payload", "result", "error", "attributes", "salts"),
    "archive_quarantine": ("raw_value",),
}
"""What ``sgc_erase_saga`` clears: the openings and data attributes, and quarantined bytes."""

SERVICE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "sagacity_approval_request": ("payload",),
    "sagacity_approval_event": ("entry",),
    "sagacity_compensation_claims": ("result", "error"),
    "sagacity_attention": ("detail",),
}
"""What :func:`~sagacity.postgres._erasure.clear_service_copies` clears."""


def refresh_statistics(archive_database: str | None, services_database: str | None) -> list[str]:
    """``ANALYZE`` the columns an erasure cleared, in the archive and the services' tables
    (a table that does not exist is skipped; ``None``: that database is not refreshed).

    Returns:
        the tables whose statistics could not be refreshed (the role may not analyze them, or
        the database failed), each also logged as a warning saying what to run.
    """
    targets: dict[str, dict[str, tuple[str, ...]]] = {}
    if archive_database is not None:
        targets.setdefault(archive_database, {}).update(ARCHIVE_COLUMNS)
    if services_database is not None:
        targets.setdefault(services_database, {}).update(SERVICE_COLUMNS)
    missed: list[str] = []
    for conninfo, columns in targets.items():
        missed += _analyze(conninfo, columns)
    return missed


def _analyze(conninfo: str, columns: Mapping[str, Sequence[str]]) -> list[str]:
    warnings: list[str] = []

    def noticed(diagnostic: Diagnostic) -> None:
        if diagnostic.severity_nonlocalized == "WARNING":
            warnings.append(diagnostic.message_primary or "")

    missed: list[str] = []
    try:
        with connect(conninfo, autocommit=True, action="refresh column statistics") as conn:
            conn.add_notice_handler(noticed)
            for table, names in columns.items():
                if not table_exists(conn, table):
                    continue
                warnings.clear()
                try:
                    conn.execute(_statement(table, names))
                except psycopg.Error as exc:
                    warnings.append(str(exc).strip())
                if warnings:
                    missed.append(table)
                    _report(table, names, "; ".join(warnings))
    except PersistenceError as exc:
        missed += [t for t in columns if t not in missed]
        _report(", ".join(columns), (), exc.message)
    return missed


def _statement(table: str, names: Sequence[str]) -> sql.Composed:
    return sql.SQL("ANALYZE {} ({})").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(n) for n in names)
    )


def _report(table: str, names: Sequence[str], why: str) -> None:
    what = f"{table} ({', '.join(names)})" if names else table
    log.warning(
        "the column statistics of %s were not refreshed after the erasure (%s): they may "
        "still hold erased values; run ANALYZE %s as the table's owner",
        table,
        why,
        what,
    )
