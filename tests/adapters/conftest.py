"""Shared fixtures for the framework adapter tests."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests._loops import close_default_event_loop


@pytest.fixture(autouse=True)
def _close_the_default_event_loop() -> Iterator[None]:
    # The OpenAI Agents SDK's Runner.run_sync installs the thread's default event loop and keeps
    # it for later runs (a later asyncio.run replaces it without closing it); close it after
    # each test, or it is reported unclosed when the interpreter exits.
    yield
    close_default_event_loop()


class KafkaLane:
    """A ``Sagacity`` journaling to a fresh one-partition topic of the real broker."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from sagacity import Sagacity
        from sagacity.producer import KafkaJournal

        self.bootstrap = bootstrap
        self.topic = topic
        self.journal = KafkaJournal(bootstrap, topic=topic, ack_timeout_s=10.0)
        self.sagacity = Sagacity(self.journal)

    def counts(self) -> Counter[tuple[str, str | None]]:
        """(event type, tool) → how many such entries the topic holds, read raw."""
        from confluent_kafka import Consumer, TopicPartition

        from sagacity.schemas import decode_entry

        self.journal.flush()
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": uuid.uuid4().hex,
                "enable.auto.commit": False,
            }
        )
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            counts: Counter[tuple[str, str | None]] = Counter()
            seen = 0
            deadline = time.monotonic() + 20
            while seen < high and time.monotonic() < deadline:
                for message in consumer.consume(100, timeout=1.0):
                    if message.error() is None:
                        seen += 1
                        entry = decode_entry(message.value())
                        counts[(entry.event_type.value, entry.tool)] += 1
            assert seen == high
            return counts
        finally:
            consumer.close()


@pytest.fixture
def kafka(kafka_bootstrap: str, make_topic: Callable[..., str]) -> Iterator[KafkaLane]:
    """A ``Sagacity`` on a fresh topic of the real broker, closed afterwards."""
    lane = KafkaLane(kafka_bootstrap, make_topic(partitions=1))
    try:
        yield lane
    finally:
        lane.journal.close()
