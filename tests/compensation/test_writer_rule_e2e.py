"""With a writer registry, the live readers take the writer rule as part of acceptance
(docs/adr/0014 §5, docs/adr/0025-trust-model.md): another registered writer's forged
``COMPENSATED`` in a saga handed to compensation plans nothing, and the real undo runs once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus
from sagacity.chain import link
from sagacity.consumers.compensation._job import WRITER_PREFIX
from sagacity.entries import _attributes as attr
from sagacity.producer import KafkaJournal
from sagacity.schemas import encode_entry
from sagacity.signing._writer_roles import WriterRole
from sagacity.signing._writer_signature import HEADER, WriterKey, WriterRegistry
from tests.compensation import svc_tools
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _key(tmp: Path, writer: str) -> tuple[Path, WriterKey]:
    path = tmp / f"{writer.replace('/', '_')}.key"
    path.write_text(f"hmac-sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}\n")
    return path, WriterKey.from_file(path, writer)


def test_a_forged_compensated_from_another_writer_does_not_skip_the_undo(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    _, owner = _key(lane.tmp, "agent-1")
    _, forger = _key(lane.tmp, "agent-2")
    service_writer = f"{WRITER_PREFIX}{lane.group}"
    service_key_path, service_key = _key(lane.tmp, service_writer)
    registry_path = lane.tmp / "writers.toml"
    registry_path.write_text(
        owner.registry_entry()
        + forger.registry_entry()
        + service_key.registry_entry(WriterRole.COMPENSATION)
    )
    registry = WriterRegistry.from_file(registry_path)
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, writer_key=owner, writers=registry)
    lane.journals.append(journal)
    agent = Sagacity(journal, compensation="delegated")
    shop = agent.wrap(svc_tools.Shop(lane.dsn))
    saga = f"writers-{uuid.uuid4().hex[:8]}"

    def work() -> None:
        shop.charge(saga, 30)
        raise RuntimeError("the order was refused")

    assert agent.saga(saga, work).status is SagaStatus.COMPENSATION_PENDING
    chain = list(agent.entries(saga))
    [executed] = [e for e in chain if e.event_type is E.EXECUTED]
    # agent-2, registered and signing with its own key, says the step is undone already.
    forged = link(
        EntryDraft(
            saga_id=saga,
            event_type=E.COMPENSATED,
            tool="charge",
            actor="compensation-service",
            attributes={attr.REF_SEQ: str(executed.seq), attr.WRITER: "agent-2"},
        ),
        seq=chain[-1].seq + 1,
        prev_hash=chain[-1].hash,
    )
    producer = Producer({"bootstrap.servers": lane.bootstrap, "partitioner": "murmur2_random"})
    producer.produce(
        lane.topic,
        key=saga.encode(),
        value=encode_entry(forged),
        headers=[(HEADER, forger.sign(saga_id=saga, seq=forged.seq, hash=forged.hash))],
    )
    assert producer.flush(10) == 0
    # A reader with the registry refuses it: agent-2 may not write into agent-1's saga.
    read = journal.read(saga)
    [refused] = [r for r in read.rejected if r.entry.hash == forged.hash]
    assert refused.kind.value == "writer_not_owner"
    lane.start(
        SAGACITY_WRITER_REGISTRY=str(registry_path),
        SAGACITY_COMPENSATION_WRITER_KEY=str(service_key_path),
    )
    outcome = agent.wait_for_outcome(saga, timeout=60)
    assert outcome.status is SagaStatus.COMPENSATED, outcome
    # The undo of the charge step (its refund) was called, once.
    assert [c for c in lane.calls() if c[0] == saga] == [(saga, executed.seq, "charge")]
