"""The approvals service's tables (the Postgres adapter's :mod:`sagacity.postgres._requests`)."""

from __future__ import annotations

from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.postgres._requests import PostgresRequestStore as ApprovalStore
from sagacity.postgres._requests_schema import SCHEMA

__all__ = ["DEFAULT_TOPIC", "SCHEMA", "ApprovalStore"]
