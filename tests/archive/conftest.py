"""Fixtures for the archive tests: an archive schema and a batch archiver on it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from archive_helpers import decode

from sagacity.consumers.archive import BatchArchiver
from sagacity.postgres.archive import PostgresArchiveIngest, migrate
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE


@pytest.fixture
def archive_dsn(pg_dsn: str) -> str:
    """``pg_dsn`` with the archive schema created in it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    return pg_dsn


@pytest.fixture(params=["record", "entry"])
def archiver(archive_dsn: str, request: pytest.FixtureRequest) -> Iterator[BatchArchiver]:
    """The archiver checking events from their Avro record's fields (its default for the
    journal's wire format), and with a decoder given (every event through JournalEntry, the
    reference path): every test using it runs on both."""
    given = decode if request.param == "entry" else None
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        decode=given,
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()
