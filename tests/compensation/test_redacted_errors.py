"""A redacted value never reaches an error or result text (docs/adr/0019-erasure.md §5).

A tool redacting ``card_number`` whose gateway echoes the number, in its result and in its
exception: on a sealed journal (a key-encryption key), every event of the topic, opened with
the keys, holds the number only masked — ``EXECUTED``'s result, ``FAILED``'s error, the saga's
``COMPENSATION_REQUESTED`` and ``SAGA_ENDED`` and the compensation service's own events — and
the compensation service's logs never see it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from sagacity import EventType, Sagacity, SagaStatus
from sagacity.entries._events import JournalEntry
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.privacy._redaction import MASK
from sagacity.producer import KafkaJournal
from sagacity.schemas import decode_entry
from tests.compensation import svc_tools
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
CARD = "4111111111111111"


def _topic_entries(bootstrap: str, topic: str, keys: KeyService) -> list[JournalEntry]:
    """Every message of the one-partition ``topic``, decoded and opened with ``keys``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        deadline = time.monotonic() + 30
        while len(messages) < high and time.monotonic() < deadline:
            messages.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        assert len(messages) == high
    finally:
        consumer.close()
    assert all(CARD.encode() not in (m.value() or b"") for m in messages)
    return [decode_entry(m.value(), keys=keys) for m in messages]


def test_a_card_number_echoed_in_a_result_and_an_exception_is_journaled_masked(
    make_lane: Callable[..., Lane], tmp_path: Path
) -> None:
    lane = make_lane(partitions=1)
    kek = write_key_encryption_key(tmp_path / "journal.kek")
    # The service declares every tool the saga used (the read included: its undo is the
    # service's own declaration), tools that redact: it loads them with the key.
    service = lane.start(
        tools=("tests.compensation.svc_tools:card_shop",),
        **{KEK_SETTING: str(tmp_path / "journal.kek")},
    )
    keys = KeyService(PostgresKeyStore(lane.dsn), KeyRing((kek,)))
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, keys=keys)
    saga = f"order-{uuid.uuid4().hex[:8]}"
    try:
        agent = Sagacity(journal, compensation="delegated")
        shop = agent.wrap(svc_tools.CardShop(lane.dsn))

        def work() -> None:
            shop.reserve(order="o1", item="lamp")
            shop.check_card(card_number=CARD)
            shop.pay_by_card(order="o1", card_number=CARD, amount=30)

        ran = agent.saga(saga, work)
        assert ran.status is SagaStatus.COMPENSATION_PENDING
        result = agent.wait_for_outcome(saga, timeout=60)
        assert result.status is SagaStatus.COMPENSATED, result.summary()
        journal.flush()
        entries = _topic_entries(lane.bootstrap, lane.topic, keys)
    finally:
        journal.close()
        keys.close()
    assert service.terminate() == 0
    chain = [e for e in entries if e.saga_id == saga]
    kinds = [e.event_type for e in chain]
    assert kinds.count(E.SAGA_ENDED) == 2
    assert E.COMPENSATED in kinds
    leaked = [(e.seq, e.event_type.value) for e in chain if CARD in json.dumps(e.to_dict())]
    assert leaked == []
    checked = next(e for e in chain if e.event_type is E.EXECUTED and e.tool == "check_card")
    assert json.loads(checked.result or "") == {"card": MASK, "status": f"card {MASK} accepted"}
    failed = next(e for e in chain if e.event_type is E.FAILED)
    assert failed.error == f"ValueError: card {MASK} declined for order o1 (30)"
    for event in (E.COMPENSATION_REQUESTED, E.SAGA_ENDED):
        assert all(e.error == failed.error for e in chain if e.event_type is event)
    assert service.records(), "the service logged nothing"
    assert CARD not in service.logs()
