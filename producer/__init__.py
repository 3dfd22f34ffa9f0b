"""The journal on Kafka: ``KafkaJournal``, its reader and the topic's management.

``Sagacity.from_env()`` builds a ``KafkaJournal`` from ``SAGACITY_*`` variables (with its
Postgres read index) in the composition root, :mod:`sagacity._env`; this package reads no
variable and imports no other adapter.
"""

from __future__ import annotations

from sagacity.producer._config import DEFAULT_TOPIC, KafkaJournalSettings, ReadIndexSettings
from sagacity.producer._index import (
    IndexedEvent,
    IndexedPartition,
    IndexedSaga,
    RefusedMessage,
    SagaIndex,
)
from sagacity.producer._journal import RECORD_OVERHEAD, KafkaJournal, check_json_payload
from sagacity.producer._lease import LeaseView, Takeover
from sagacity.producer._partition import murmur2, partition_for
from sagacity.producer._reader import (
    HANDOFF_EVENTS,
    ForkKind,
    Ownership,
    PartitionRead,
    Rejected,
    SagaRead,
    SagaReader,
    Skipped,
    ownership,
)
from sagacity.producer._trace import current_traceparent, traced, valid_traceparent

__all__ = [
    "DEFAULT_TOPIC",
    "HANDOFF_EVENTS",
    "RECORD_OVERHEAD",
    "ForkKind",
    "IndexedEvent",
    "IndexedPartition",
    "IndexedSaga",
    "KafkaJournal",
    "KafkaJournalSettings",
    "LeaseView",
    "Ownership",
    "PartitionRead",
    "ReadIndexSettings",
    "RefusedMessage",
    "Rejected",
    "SagaIndex",
    "SagaRead",
    "SagaReader",
    "Skipped",
    "Takeover",
    "check_json_payload",
    "current_traceparent",
    "murmur2",
    "ownership",
    "partition_for",
    "traced",
    "valid_traceparent",
]
