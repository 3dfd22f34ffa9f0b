"""The journal on Kafka: ``KafkaJournal``, its reader and the topic's management.

``journal_from_env()`` is what ``Sagacity.from_env()`` uses: the same agent code runs against
the in-memory journal in unit tests and against Kafka in production.
"""

from __future__ import annotations

from collections.abc import Mapping

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
from sagacity.producer._sealing import key_service_from_env
from sagacity.producer._trace import current_traceparent, traced, valid_traceparent


def journal_from_env(
    environ: Mapping[str, str] | None = None, *, writer_id: str | None = None
) -> KafkaJournal:
    """A :class:`KafkaJournal` configured from ``SAGACITY_*`` environment variables.

    ``SAGACITY_BOOTSTRAP_SERVERS`` (required), ``SAGACITY_TOPIC`` (default
    ``sagacity.journal``), ``SAGACITY_ACK_TIMEOUT_S``, and ``SAGACITY_KAFKA_<KEY>`` for
    librdkafka settings (``SAGACITY_KAFKA_SASL_MECHANISM`` → ``sasl.mechanism``).

    Raises:
        ConfigurationError: a variable is missing or invalid.
        TopicNotFoundError / TopicConfigError / JournalUnavailableError: as
            :class:`KafkaJournal`.
    """
    settings = KafkaJournalSettings.from_env(environ)
    keys = key_service_from_env(environ)
    return KafkaJournal.from_settings(settings, writer_id=writer_id, keys=keys)


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
    "journal_from_env",
    "key_service_from_env",
    "murmur2",
    "ownership",
    "partition_for",
    "traced",
    "valid_traceparent",
]
