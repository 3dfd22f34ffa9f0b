"""The journal on Kafka: ``KafkaJournal``, its reader and the topic's management; and the
services' consumer runtime on Kafka (``KafkaConsumers``: the loop, its client settings, the
dead-letter topic; the port is :class:`sagacity.ports.Consumers`).

``Sagacity.from_env()`` builds a ``KafkaJournal`` from ``SAGACITY_*`` variables (with its
Postgres read index) in the composition root, :mod:`sagacity._env`; this package reads no
variable and imports no other adapter.
"""

from __future__ import annotations

from sagacity.chain._acceptance import ForkKind
from sagacity.producer._clients import (
    BrokerCheck,
    check_reachable,
    cluster_id,
    kafka_reason,
    startup_timeout,
    topic_unreadable,
    with_logger,
)
from sagacity.producer._config import DEFAULT_TOPIC, KafkaJournalSettings, ReadIndexSettings
from sagacity.producer._consume import (
    FIXED_SETTINGS,
    LAG_INTERVAL_S,
    ConsumerRuntime,
    KafkaConsumers,
    client_config,
)
from sagacity.producer._deadletter import (
    REASON_HEADER,
    DeadLetters,
    ensure_dead_letter_topic,
    ensure_topic,
)
from sagacity.producer._denied import access_denied
from sagacity.producer._index import (
    IndexedEvent,
    IndexedPartition,
    IndexedSaga,
    RefusedMessage,
    SagaIndex,
)
from sagacity.producer._journal import RECORD_OVERHEAD, KafkaJournal
from sagacity.producer._lease import LeaseView, Takeover
from sagacity.producer._partition import (
    KAFKA_PARTITIONER,
    WRONG_PARTITION,
    KafkaPartitioner,
    misplaced,
    murmur2,
    partition_for,
)
from sagacity.producer._reader import (
    HANDOFF_EVENTS,
    Ownership,
    PartitionRead,
    Rejected,
    SagaRead,
    SagaReader,
    Skipped,
    ownership,
)
from sagacity.producer._topic import MIN_RETENTION_MS, TopicSpec, journal_identity, parse_retention
from sagacity.producer._topic import check as check_topic
from sagacity.producer._topic import create as create_topic
from sagacity.producer._topic import describe as describe_topic
from sagacity.producer._topic_pass import KafkaTopicPass, KafkaTopicPasses
from sagacity.producer._trace import current_traceparent, traced, valid_traceparent
from sagacity.tools._codec import check_json_payload

__all__ = [
    "DEFAULT_TOPIC",
    "FIXED_SETTINGS",
    "HANDOFF_EVENTS",
    "KAFKA_PARTITIONER",
    "LAG_INTERVAL_S",
    "MIN_RETENTION_MS",
    "REASON_HEADER",
    "RECORD_OVERHEAD",
    "WRONG_PARTITION",
    "BrokerCheck",
    "ConsumerRuntime",
    "DeadLetters",
    "ForkKind",
    "IndexedEvent",
    "IndexedPartition",
    "IndexedSaga",
    "KafkaConsumers",
    "KafkaJournal",
    "KafkaJournalSettings",
    "KafkaPartitioner",
    "KafkaTopicPass",
    "KafkaTopicPasses",
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
    "TopicSpec",
    "access_denied",
    "check_json_payload",
    "check_reachable",
    "check_topic",
    "client_config",
    "cluster_id",
    "create_topic",
    "current_traceparent",
    "describe_topic",
    "ensure_dead_letter_topic",
    "ensure_topic",
    "journal_identity",
    "kafka_reason",
    "misplaced",
    "murmur2",
    "ownership",
    "parse_retention",
    "partition_for",
    "startup_timeout",
    "topic_unreadable",
    "traced",
    "valid_traceparent",
    "with_logger",
]
