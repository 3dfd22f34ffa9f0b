"""The archive's schema (kept here for the archive's modules; the Postgres adapter declares it:
:mod:`sagacity.postgres._archive_schema`)."""

from __future__ import annotations

from sagacity.postgres._archive_schema import (
    APPEND_ONLY_TABLES,
    ARCHIVE_TABLES,
    FORMS_VERSION,
    LOG_VERSION,
    MIGRATIONS,
    ROUNDS_VERSION,
    TABLES_ADDED_IN,
    checkpoint_round_columns,
)

__all__ = [
    "APPEND_ONLY_TABLES",
    "ARCHIVE_TABLES",
    "FORMS_VERSION",
    "LOG_VERSION",
    "MIGRATIONS",
    "ROUNDS_VERSION",
    "TABLES_ADDED_IN",
    "checkpoint_round_columns",
]
