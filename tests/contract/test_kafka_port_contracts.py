"""The journal's Kafka-side adapters meet their ports' contracts: the partitioner."""

from __future__ import annotations

from sagacity.ports import Partitioner
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.testing.contracts import PartitionerContract


class TestKafkaPartitioner(PartitionerContract):
    def create_partitioner(self) -> Partitioner:
        return KAFKA_PARTITIONER
