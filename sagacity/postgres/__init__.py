"""The Postgres adapter: connections, the error table, migrations, positions, and the stores
behind the ports (:mod:`sagacity.ports`) that live in Postgres.

* :func:`connect` / :func:`transaction`: the one way to reach the database; every psycopg
  error leaves as a :class:`~sagacity.errors.PersistenceError`, retryable
  (:class:`~sagacity.errors.PersistenceUnavailableError`) only after a lost connection, a
  serialization failure or a deadlock (:func:`retryable`).
* :func:`migrate`: versioned migrations under one advisory lock per schema.
* :func:`positions` / :func:`store_positions`: consumer positions stored with the effects.
* :class:`PostgresClaimStore` (:class:`~sagacity.ports.ClaimStore`), :class:`PostgresSagaIndex`
  (:class:`~sagacity.ports.SagaIndex`, over the archive's tables), :class:`PostgresRequestStore`
  (:class:`~sagacity.ports.RequestStore`, the approvals service's tables),
  :class:`PostgresConsoleSessions` (:class:`~sagacity.ports.ConsoleSessionTable`, the
  approvals console's sessions), :class:`PostgresNoticeClaims`
  (:class:`~sagacity.ports.NoticeClaims`, its notifier's claims), :class:`PostgresSlackTables`
  (:class:`~sagacity.ports.SlackTables`, its Slack integration's), :class:`PostgresKeyStore`
  (:class:`~sagacity.ports.KeyStore`, the per-saga data keys),
  :class:`PostgresServiceTables` (:class:`~sagacity.ports.ServiceTables`, as an erasure
  clears them), :class:`ArchiveEraser` (:class:`~sagacity.ports.ErasableArchive`, the
  archive's tables as an erasure clears them).
"""

from __future__ import annotations

from sagacity.postgres._archive_erasure import (
    FORM_ONE_REFUSED,
    ArchiveEraser,
    ErasureRecord,
    archived_count,
    erase_in_archive,
    erasure_records,
)
from sagacity.postgres._claims import PostgresClaimStore
from sagacity.postgres._connect import connect, ping, transaction, with_search_path
from sagacity.postgres._console_sessions import PostgresConsoleSessions
from sagacity.postgres._erasure import PostgresServiceTables
from sagacity.postgres._errors import error_class, map_error, mapped_errors, retryable
from sagacity.postgres._index import PostgresSagaIndex
from sagacity.postgres._keys import PostgresKeyStore
from sagacity.postgres._migrate import applied_versions, current_schema, migrate
from sagacity.postgres._notice_claims import PostgresNoticeClaims
from sagacity.postgres._positions import ensure_positions, positions, store_positions
from sagacity.postgres._requests import PostgresRequestStore
from sagacity.postgres._slack import PostgresSlackTables

__all__ = [
    "FORM_ONE_REFUSED",
    "ArchiveEraser",
    "ErasureRecord",
    "PostgresClaimStore",
    "PostgresConsoleSessions",
    "PostgresKeyStore",
    "PostgresNoticeClaims",
    "PostgresRequestStore",
    "PostgresSagaIndex",
    "PostgresServiceTables",
    "PostgresSlackTables",
    "applied_versions",
    "archived_count",
    "connect",
    "current_schema",
    "ensure_positions",
    "erase_in_archive",
    "erasure_records",
    "error_class",
    "map_error",
    "mapped_errors",
    "migrate",
    "ping",
    "positions",
    "retryable",
    "store_positions",
    "transaction",
    "with_search_path",
]
