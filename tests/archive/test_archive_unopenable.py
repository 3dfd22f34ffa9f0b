"""Sealed events whose saga's data key the archive cannot have are quarantined under the
reason of their own (docs/reliability.md, "Hostile inputs"), and the archive goes on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import EntryDraft, EventType, JournalEntry
from sagacity.chain import GENESIS_HASH, committing, link
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.postgres import PostgresKeyStore
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.privacy._envelope import KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE
from sagacity.schemas._sealed import encode_sealed

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def stray_dsn(postgres_dsn: str) -> Iterator[str]:
    """Another fresh schema: a key store the archive never sees."""
    schema = f"stray_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
    params["options"] = f"-c search_path={schema}"
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _sealed_saga(saga_id: str, keys: KeyService, offset: int) -> list[RawEvent]:
    chain: list[JournalEntry] = []
    prev = GENESIS_HASH
    for draft in (
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED),
        EntryDraft(saga_id=saga_id, event_type=EventType.INTENT, tool="mail", payload='"hi"'),
    ):
        entry = link(committing(draft), seq=len(chain) + 1, prev_hash=prev)
        chain.append(entry)
        prev = entry.hash
    return [
        RawEvent(
            topic="t",
            partition=0,
            offset=offset + i,
            key=saga_id.encode(),
            value=encode_sealed(e, keys),
        )
        for i, e in enumerate(chain)
    ]


def test_sealed_events_whose_key_cannot_be_had_are_quarantined_with_their_reason(
    archive_dsn: str, stray_dsn: str, tmp_path: Path
) -> None:
    mine = write_key_encryption_key(tmp_path / "archive.kek")
    foreign = write_key_encryption_key(tmp_path / "foreign.kek")
    elsewhere = KeyService(PostgresKeyStore(stray_dsn), KeyRing((foreign,)))
    foreign_here = KeyService(PostgresKeyStore(archive_dsn), KeyRing((foreign,)))
    keys = KeyService(PostgresKeyStore(archive_dsn), KeyRing((mine,)))
    try:
        raw = [
            *_sealed_saga("key-elsewhere", elsewhere, 0),
            *_sealed_saga("key-foreign", foreign_here, 2),
            *_sealed_saga("legit", keys, 4),
        ]
        archiver = BatchArchiver(
            PostgresArchiveIngest(archive_dsn),
            consumer_group="g",
            keys=keys,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        try:
            report = archiver.archive(raw)
        finally:
            archiver.close()
    finally:
        for service in (elsewhere, foreign_here, keys):
            service.close()
    assert report.archived == 4  # the legit saga and the two openings (nothing sealed in them)
    with psycopg.connect(archive_dsn) as conn:
        reasons = conn.execute(
            "SELECT saga_id, reason FROM archive_quarantine ORDER BY kafka_offset"
        ).fetchall()
    # The saga's sealed INTENT is its key's fate; its opening (nothing sealed) is archived.
    assert reasons == [
        ("key-elsewhere", "data key not found"),
        ("key-foreign", "key-encryption key not held"),
    ]
