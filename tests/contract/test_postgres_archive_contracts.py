"""The Postgres archive's store adapters meet their ports' contracts, on a real server (a
schema per test)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from sagacity.consumers.archive._rowcheck import JOURNAL_COLUMNS
from sagacity.ports import ArchiveIngest
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.testing.contracts import ArchiveIngestContract, CheckpointSigningContract
from sagacity.testing.contracts._archive_ingest import Message, Refusal

pytestmark = [pytest.mark.postgres]


class TestPostgresArchiveIngest(ArchiveIngestContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_ingest(self) -> ArchiveIngest:
        return PostgresArchiveIngest(self.dsn)

    def journal_row(
        self, saga_id: str, seq: int, hash: str, *, recorded_at_us: int, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        values = {
            "saga_id": saga_id,
            "seq": seq,
            "event_type": "TOOL_CALL_STARTED",
            "recorded_at_us": recorded_at_us,
            "hash": hash,
            "prev_hash": f"before {hash}",
            "topic": "journal.contract",
            "kafka_partition": 0,
            "kafka_offset": offset,
            "attributes": "{}",
            "commitments": "{}",
            "salts": "{}",
            "form": 1,
        }
        return JOURNAL_COLUMNS, tuple(values.get(c) for c in JOURNAL_COLUMNS)

    def quarantined(self, ingest: ArchiveIngest) -> list[Refusal]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT reason, detail, saga_id, seq, topic, kafka_partition, kafka_offset,"
                " raw_key, raw_value FROM archive_quarantine ORDER BY id"
            ).fetchall()
        return [
            Refusal(reason, detail, Message(topic, part, off, key, value), saga_id, seq)
            for reason, detail, saga_id, seq, topic, part, off, key, value in rows
        ]


class TestPostgresCheckpointSigning(CheckpointSigningContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_ingest(self) -> ArchiveIngest:
        return PostgresArchiveIngest(self.dsn)
