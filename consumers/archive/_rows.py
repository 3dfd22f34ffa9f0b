"""Archived rows read back as entries (kept here for the archive's modules; the Postgres adapter
declares them: :mod:`sagacity.postgres._rows`)."""

from __future__ import annotations

from sagacity.postgres._rows import FORM_COLUMNS, ROW_COLUMNS, entry_of_row

__all__ = ["FORM_COLUMNS", "ROW_COLUMNS", "entry_of_row"]
