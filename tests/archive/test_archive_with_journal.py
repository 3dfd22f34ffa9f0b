"""The archive fed by the real saga core on the real Kafka journal: what the core journals is
archived field for field, verifies, and exports into a bundle the standalone verifier accepts."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from archive_helpers import rows

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
    compose,
)
from sagacity.consumers.archive import audit, generate_key
from sagacity.consumers.archive._export import export_bundle
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.postgres.archive import PostgresArchiveAudits, PostgresSagaBundles
from sagacity.producer import KafkaJournal

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


class Shop:
    def __init__(self) -> None:
        self.stock = {"SKU-9": 5}

    @compensable(by="release")
    def reserve(self, product_id: str, quantity: int) -> str:
        self.stock[product_id] -= quantity
        return f"reserved {quantity}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        self.stock[context.arguments["product_id"]] += context.arguments["quantity"]

    @compensable(by="cancel")
    def order(self, product_id: str) -> str:
        raise RuntimeError("order service down")

    @compensation
    def cancel(self, context: CompensationContext) -> None:
        pass

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def confirm(self, order_id: str) -> str:
        return f"confirmed {order_id}"


def test_sagas_journaled_on_kafka_are_archived_exactly_and_verify(
    kafka_bootstrap, make_topic, archive_dsn, tmp_path, approvals_key
):
    topic = make_topic(partitions=3)
    journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        agent = Sagacity(journal, decision_signer=approvals_key)
        tools = agent.wrap(Shop())

        def failing() -> None:
            tools.reserve("SKU-9", 2)
            with contextlib.suppress(RuntimeError):
                tools.order("SKU-9")

        assert agent.saga("order-1", failing).status is SagaStatus.COMPENSATED
        gated = agent.saga("order-2", lambda: tools.confirm("o-2"))
        assert gated.status is SagaStatus.AWAITING_APPROVAL
        agent.approve("order-2", gated.awaiting_seq, "manager@example.com")
        agent.resume_saga("order-2", gated.awaiting_seq, '{"order_id":"o-2"}')
        journal.flush()
        expected = {s: [e.to_dict() for e in journal.entries(s)] for s in ("order-1", "order-2")}
    finally:
        journal.close()
    total = sum(map(len, expected.values()))
    key = tmp_path / "k.pem"
    signer = generate_key(key)
    service = ArchiveService(
        ArchiveSettings(
            bootstrap_servers=kafka_bootstrap,
            database_url=archive_dsn,
            topic=topic,
            group_id=f"g-{uuid.uuid4().hex[:6]}",
            poll_timeout=0.2,
            signing_key=key,
            checkpoint_interval=3600,
        ),
        dependencies=compose.archive(),
    )
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if rows(archive_dsn, "SELECT count(*) FROM side_effect_journal")[0][0] >= total:
                break
            time.sleep(0.2)
    finally:
        service.stop()
        runner.join(30)
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine") == [(0,)]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        assert (summary.sagas, summary.ok, summary.events) == (2, 2, total)
        assert summary.checkpoints == 2  # signed at shutdown
        for saga_id, entries in expected.items():
            archived = conn.execute(
                "SELECT saga_id, seq, event_type, tool, payload, result, error, actor,"
                " attributes, recorded_at_us, prev_hash, hash FROM side_effect_journal"
                " WHERE saga_id = %s ORDER BY seq",
                (saga_id,),
            ).fetchall()
            keys = list(entries[0])
            assert [dict(zip(keys, r, strict=True)) for r in archived] == entries
        bundle = tmp_path / "bundle"
        assert export_bundle(PostgresSagaBundles(conn), "order-2", bundle).ok
    check = subprocess.run(
        [
            sys.executable,
            "-I",
            str(bundle / "verify_bundle.py"),
            str(bundle),
            "--public-key",
            signer.public_hex,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
