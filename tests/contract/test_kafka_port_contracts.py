"""The journal's Kafka-side adapters meet their ports' contracts: the partitioner, the wire
format, and on a real broker the passes over the topic and the writer leases."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer

from sagacity.entries._events import JournalEntry
from sagacity.errors import SagacityError
from sagacity.ports import JournalWire, Partitioner, TopicMessage, TopicPasses
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal, KafkaTopicPasses
from sagacity.schemas import JOURNAL_WIRE, encode_entry
from sagacity.testing.contracts import (
    LEASE_CLOCK_SKEW_S,
    LEASE_TTL_S,
    JournalWireContract,
    OutgoingMessage,
    PartitionerContract,
    TopicPassesContract,
    WriterLeasesContract,
)


class TestKafkaPartitioner(PartitionerContract):
    def create_partitioner(self) -> Partitioner:
        return KAFKA_PARTITIONER


class TestAvroWire(JournalWireContract):
    def create_wire(self) -> JournalWire:
        return JOURNAL_WIRE

    def encode(self, entry: JournalEntry) -> bytes:
        return encode_entry(entry)


@pytest.mark.kafka
class TestKafkaTopicPasses(TopicPassesContract):
    @pytest.fixture(autouse=True)
    def _broker(self, kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
        self.bootstrap, self.make_topic = kafka_bootstrap, make_topic

    def create_passes(self) -> TopicPasses:
        return KafkaTopicPasses()

    def create_topic(self, partitions: int) -> str:
        return self.make_topic(partitions=partitions)

    def client_config(self) -> Mapping[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"contract-pass-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }

    def produce(
        self, topic: str, messages: Sequence[OutgoingMessage], *, transactional: bool = False
    ) -> list[TopicMessage]:
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "acks": "all"}
        if transactional:
            config["transactional.id"] = f"contract-{uuid.uuid4().hex}"
        producer = Producer(config)
        placed: list[TopicMessage | None] = [None] * len(messages)

        def delivered(i: int) -> Callable[[Any, Any], None]:
            def record(err: Any, msg: Any) -> None:
                assert err is None, err
                sent = messages[i]  # a delivery report carries no headers
                placed[i] = TopicMessage(
                    partition=msg.partition(),
                    offset=msg.offset(),
                    key=sent.key,
                    value=sent.value,
                    headers=dict(sent.headers),
                )

            return record

        if transactional:
            producer.init_transactions(30)
            producer.begin_transaction()
        for i, m in enumerate(messages):
            producer.produce(
                topic,
                key=m.key,
                value=m.value,
                partition=m.partition,
                headers=dict(m.headers),
                on_delivery=delivered(i),
            )
        if transactional:
            producer.commit_transaction(30)
        assert producer.flush(30) == 0
        assert all(p is not None for p in placed)
        return [p for p in placed if p is not None]


@pytest.mark.kafka
class TestKafkaWriterLeases(WriterLeasesContract):
    @pytest.fixture(autouse=True)
    def _broker(self, kafka_bootstrap: str, make_topic: Callable[..., str]) -> Iterator[None]:
        self.bootstrap, self.topic = kafka_bootstrap, make_topic(partitions=3)
        self.made: list[KafkaJournal] = []
        yield
        for journal in self.made:
            with contextlib.suppress(SagacityError):
                journal.close()

    def _journal(self, **options: Any) -> KafkaJournal:
        journal = KafkaJournal(self.bootstrap, topic=self.topic, ack_timeout_s=10.0, **options)
        self.made.append(journal)
        return journal

    def create_writer(self) -> KafkaJournal:
        return self._journal(lease_ttl_s=LEASE_TTL_S)

    def create_leases(self, *, ahead_s: float = 0.0) -> KafkaJournal:
        return self._journal(
            max_clock_skew_s=LEASE_CLOCK_SKEW_S, wall_clock=lambda: time.time() + ahead_s
        )
