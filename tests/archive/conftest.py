"""Fixtures for the archive tests: an archive schema and a batch archiver on it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from archive_helpers import decode

from sagacity.consumers.archive import BatchArchiver, migrate


@pytest.fixture
def archive_dsn(pg_dsn: str) -> str:
    """``pg_dsn`` with the archive schema created in it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    return pg_dsn


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    a = BatchArchiver(archive_dsn, consumer_group="g", decode=decode, retry_delay=0.05)
    yield a
    a.close()
