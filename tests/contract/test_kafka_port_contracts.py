"""The journal's Kafka-side adapters meet their ports' contracts: the partitioner and the wire
format."""

from __future__ import annotations

from sagacity.entries._events import JournalEntry
from sagacity.ports import JournalWire, Partitioner
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE, encode_entry
from sagacity.testing.contracts import JournalWireContract, PartitionerContract


class TestKafkaPartitioner(PartitionerContract):
    def create_partitioner(self) -> Partitioner:
        return KAFKA_PARTITIONER


class TestAvroWire(JournalWireContract):
    def create_wire(self) -> JournalWire:
        return JOURNAL_WIRE

    def encode(self, entry: JournalEntry) -> bytes:
        return encode_entry(entry)
