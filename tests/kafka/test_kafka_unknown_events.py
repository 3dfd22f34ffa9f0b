"""An event type this release does not know, written by a newer writer into a saga on the real
broker: every reader decodes it, verifies it and keeps the chain after it intact; the core
treats it as neutral, and conservatively where it cannot judge it (docs/adr/0003)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from sagacity import (
    EntryDraft,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Sagacity,
    SagaStatus,
    UnknownEventType,
    compose,
    verify,
)
from sagacity.chain import link
from sagacity.errors import SagacityError, UnverifiableApprovalError
from sagacity.postgres.archive import PostgresArchiveAudits, PostgresSagaBundles
from sagacity.producer import KafkaJournal
from sagacity.producer._reader import ownership
from sagacity.schemas import encode_entry
from tests.core.test_approval import ALICE, Bank

pytestmark = [pytest.mark.kafka]
FUTURE = UnknownEventType("CHECKPOINT_NOTED")


@pytest.fixture
def journals(kafka_bootstrap: str, make_topic: Callable[..., str]) -> Iterator[Callable[[], Any]]:
    topic = make_topic(partitions=3)
    made: list[KafkaJournal] = []

    def make() -> KafkaJournal:
        journal = KafkaJournal(kafka_bootstrap, topic=topic, ack_timeout_s=10.0)
        made.append(journal)
        return journal

    yield make
    for journal in made:
        with contextlib.suppress(SagacityError):
            journal.close()


def _newer_writer_saga(saga_id: str) -> list[JournalEntry]:
    """What a newer release journals for a gated saga: the core's own events, with an event of
    a type this release does not know after the first executed step."""
    memory = InMemoryJournal()
    agent = Sagacity(journal=memory, compensation="delegated")
    tools = agent.wrap(Bank())

    def work() -> None:
        tools.reserve_inventory("SKU-9")
        tools.send_wire_transfer("100", "alice")

    assert agent.saga(saga_id, work).status is SagaStatus.AWAITING_APPROVAL
    core = list(memory.entries(saga_id))
    executed = next(e for e in core if e.event_type is EventType.EXECUTED)
    future = EntryDraft(
        saga_id=saga_id,
        event_type=FUTURE,
        actor=core[0].actor,
        result="a fact this release cannot interpret",
        attributes={"ref_seq": str(executed.seq), "future_attribute": "x"},
        recorded_at_us=executed.recorded_at_us + 1,
    )
    drafts: list[EntryDraft] = [*core[: executed.seq], future, *core[executed.seq :]]
    # Nothing after the insertion refers to a seq by number, so relinking keeps the meaning.
    assert all(d.attributes.get("ref_seq") is None for d in core[executed.seq :])
    chain: list[JournalEntry] = []
    prev = "0" * 64
    for seq, draft in enumerate(drafts, start=1):
        chain.append(link(draft, seq=seq, prev_hash=prev))
        prev = chain[-1].hash
    return chain


def _produce_raw(bootstrap: str, topic: str, chain: list[JournalEntry]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "partitioner": "murmur2_random"}
    )
    for entry in chain:
        producer.produce(topic, key=entry.saga_id.encode(), value=encode_entry(entry))
    assert producer.flush(30) == 0


def test_readers_accept_a_chain_through_an_unknown_event_type(
    kafka_bootstrap: str, journals: Callable[[], KafkaJournal]
) -> None:
    reader = journals()
    saga = f"future-{uuid.uuid4().hex[:8]}"
    chain = _newer_writer_saga(saga)
    _produce_raw(kafka_bootstrap, reader.topic, chain)
    read = reader.read(saga)
    assert not read.skipped
    assert not read.rejected
    assert [e.hash for e in read.entries] == [e.hash for e in chain]
    unknown = [e for e in read.entries if isinstance(e.event_type, UnknownEventType)]
    assert [(e.event_type.value, e.attributes["future_attribute"]) for e in unknown] == [
        ("CHECKPOINT_NOTED", "x")
    ]
    assert verify(read.entries).ok
    # Neutral for ownership: the saga was handed to approvals, the unknown event changes nothing.
    assert not read.ownership.live
    assert ownership(read.entries[: unknown[0].seq]).live


def test_approvals_accept_the_chain_and_compensation_does_not_call_it_clean(
    kafka_bootstrap: str, journals: Callable[[], KafkaJournal], approvals_key: Any
) -> None:
    service_bank = Bank()
    service = Sagacity(journal=journals(), decision_signer=approvals_key)
    service.wrap(service_bank)
    # Approval and rejection on a saga whose unknown event comes before the request.
    approved, rejected = (f"future-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for saga in (approved, rejected):
        _produce_raw(kafka_bootstrap, journals().topic, _newer_writer_saga(saga))

    (pending,) = service.pending_approvals(approved)
    service.approve(approved, pending.seq, "manager@example.com")
    result = service.resume_saga(approved, pending.seq, ALICE)
    assert result.status is SagaStatus.COMPLETED
    assert service_bank.wires == [("100", "alice")]
    assert verify(journals().entries(approved)).ok

    (pending,) = service.pending_approvals(rejected)
    result = service.reject(rejected, pending.seq, "manager@example.com", reason="no")
    # The known step is undone, but the saga is not reported clean: this release cannot tell
    # whether the unknown event recorded an effect needing an undo.
    assert [c.result for c in service_bank.released] == ["held-SKU-9"]
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert any("CHECKPOINT_NOTED is unknown to this release" in s.reason for s in result.dirty)
    final = journals().read(rejected)
    assert verify(final.entries).ok
    assert not final.rejected
    assert final.entries[-1].event_type is EventType.SAGA_ENDED


def test_a_resume_after_an_unknown_event_is_refused_and_the_tool_not_called(
    kafka_bootstrap: str, journals: Callable[[], KafkaJournal], approvals_key: Any
) -> None:
    saga = f"future-{uuid.uuid4().hex[:8]}"
    chain = _newer_writer_saga(saga)
    request = next(e for e in chain if e.event_type is EventType.AWAITING_APPROVAL)
    without = [e for e in chain if not isinstance(e.event_type, UnknownEventType)]
    relinked: list[JournalEntry] = []
    prev = "0" * 64
    for seq, entry in enumerate(without, start=1):
        relinked.append(link(entry, seq=seq, prev_hash=prev))
        prev = relinked[-1].hash
    tail = relinked[-1]
    # The newer release journals something about the request after it was made.
    late = link(
        EntryDraft(
            saga_id=saga,
            event_type=FUTURE,
            attributes={"ref_seq": str(request.seq - 1)},
        ),
        seq=tail.seq + 1,
        prev_hash=tail.hash,
    )
    _produce_raw(kafka_bootstrap, journals().topic, [*relinked, late])
    bank = Bank()
    service = Sagacity(journal=journals(), decision_signer=approvals_key)
    service.wrap(bank)
    (pending,) = service.pending_approvals(saga)
    service.approve(saga, pending.seq, "manager@example.com")  # a signature is harmless
    with pytest.raises(UnverifiableApprovalError, match="CHECKPOINT_NOTED, unknown to this"):
        service.resume_saga(saga, pending.seq, ALICE)
    assert bank.wires == []
    assert [p.seq for p in service.pending_approvals(saga)] == [pending.seq]


@pytest.mark.postgres
def test_the_archive_ingests_and_verifies_a_chain_with_an_unknown_event_type(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    from sagacity.consumers.archive import audit, generate_key
    from sagacity.consumers.archive._export import export_bundle
    from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
    from sagacity.postgres.archive import migrate

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    topic = make_topic(partitions=3)
    saga = f"future-{uuid.uuid4().hex[:8]}"
    chain = _newer_writer_saga(saga)
    _produce_raw(kafka_bootstrap, topic, chain)
    key = tmp_path / "k.pem"
    signer = generate_key(key)
    service = ArchiveService(
        ArchiveSettings(
            bootstrap_servers=kafka_bootstrap,
            database_url=pg_dsn,
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
            with psycopg.connect(pg_dsn) as conn:
                (count,) = conn.execute("SELECT count(*) FROM side_effect_journal").fetchone()
            if count >= len(chain):
                break
            time.sleep(0.2)
    finally:
        service.stop()
        runner.join(30)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM archive_quarantine").fetchone() == (0,)
        stored = conn.execute(
            "SELECT event_type FROM side_effect_journal WHERE saga_id = %s ORDER BY seq", (saga,)
        ).fetchall()
        assert [r[0] for r in stored] == [e.event_type.value for e in chain]
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        assert (summary.sagas, summary.ok, summary.events) == (1, 1, len(chain))
        bundle = tmp_path / "bundle"
        assert export_bundle(PostgresSagaBundles(conn), saga, bundle).ok
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
