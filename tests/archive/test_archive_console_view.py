"""The console's view of the archive: a saga's audit verdict and its bundle as a download."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.cli._archive_bundles import ArchiveExports
from sagacity.consumers.approvals.console._archive import ArchiveView
from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres


def test_verdict_and_bundle_of_an_archived_saga(archiver, archive_dsn) -> None:
    chain = make_chain("saga-v", 5)
    archiver.archive(as_raw(chain))
    view = ArchiveView(ArchiveExports(archive_dsn))
    ok, detail = view.verdict("saga-v") or (False, "none")
    assert ok, detail
    assert "archive verifies 5 events" in detail
    assert view.verdict("saga-unknown") is None
    names = zipfile.ZipFile(io.BytesIO(view.bundle("saga-v"))).namelist()
    assert "events.jsonl" in names
    assert "verify_bundle.py" in names
    # An edited row in the archive is what the verdict reports.
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # past the append-only guard
        conn.execute(
            "UPDATE side_effect_journal SET payload = 'edited' WHERE saga_id = %s AND seq = 2",
            ("saga-v",),
        )
    ok, detail = view.verdict("saga-v") or (True, "none")
    assert not ok
    assert "does NOT verify at seq 2" in detail


@pytest.mark.kafka
def test_the_consoles_bundle_withholds_redaction_salts_and_still_verifies(
    kafka_bootstrap: str, make_topic: Any, archive_dsn: str, tmp_path: Path
) -> None:
    from test_redaction_end_to_end import ADA, CARD, Payments, _raw

    from sagacity import EventType, Sagacity, SagaStatus
    from sagacity.consumers.archive import BatchArchiver, RawEvent
    from sagacity.postgres import PostgresKeyStore
    from sagacity.privacy._envelope import KeyRing, write_key_encryption_key
    from sagacity.privacy._keys import KeyService
    from sagacity.privacy._redaction import stored_salts
    from sagacity.producer import KafkaJournal
    from sagacity.signing._decision_signature import DecisionSigner

    topic = make_topic(partitions=1)
    keys = KeyService(
        PostgresKeyStore(archive_dsn),
        KeyRing((write_key_encryption_key(tmp_path / "journal.kek"),)),
    )
    journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
    try:
        sagacity = Sagacity(journal, decision_signer=DecisionSigner.ephemeral())
        tools = sagacity.wrap(Payments())
        held = sagacity.saga("pay-c", lambda: tools.charge(CARD, ADA, 120))
        assert held.status is SagaStatus.AWAITING_APPROVAL
        journal.flush()
        request = next(
            e
            for e in journal.reader.read("pay-c").entries
            if e.event_type is EventType.AWAITING_APPROVAL
        )
        salts = list(stored_salts(request.attributes["redaction"]).values())
        assert salts
    finally:
        journal.close()
    messages = _raw(kafka_bootstrap, topic)
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        keys=keys,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        raw = [
            RawEvent(topic=topic, partition=0, offset=m.offset(), key=m.key(), value=m.value())
            for m in messages
        ]
        assert archiver.archive(raw).archived == len(messages)
    finally:
        archiver.close()
        keys.close()

    out = tmp_path / "bundle"
    zipfile.ZipFile(
        io.BytesIO(ArchiveView(ArchiveExports(archive_dsn)).bundle("pay-c"))
    ).extractall(out)
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [s for s in salts if s.encode() in data], path
            assert CARD.encode() not in data, path
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert all("redaction" not in e["attributes"] for e in events)
    assert any("redaction" in (e.get("commitments") or {}) for e in events)
    verified = subprocess.run(
        [sys.executable, "-I", str(out / "verify_bundle.py"), str(out), "--allow-unsigned"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "redaction" in verified.stdout  # reported withheld, verified by its commitment
