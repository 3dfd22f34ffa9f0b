"""What a :class:`~sagacity.producer.KafkaJournal` is built from, beside its settings.

Its writer's id, the journal topic's description (a compacting topic refused) and its
producer, whose settings a client's own may not weaken.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sagacity.errors import ConfigurationError, TopicConfigError
from sagacity.producer._clients import with_logger
from sagacity.producer._config import KafkaJournalSettings
from sagacity.producer._index import SagaIndex
from sagacity.producer._topic import (
    PRODUCER_MAX_MESSAGE_BYTES,
    ClientConfig,
    TopicInfo,
    compaction_refusal,
    describe,
)
from sagacity.schemas._sealed import FieldSealer
from sagacity.signing._writer_signature import WriterKey, WriterRegistry


@dataclasses.dataclass(frozen=True, kw_only=True)
class Given:
    """What a journal is given beside its settings (objects, not configuration)."""

    writer_id: str | None
    writer_key: WriterKey | None
    journal_name: str | None
    monotonic: Callable[[], float]
    wall_clock: Callable[[], float]
    index: SagaIndex | None
    keys: FieldSealer | None
    writers: WriterRegistry | None


def writer_id_of(writer_id: str | None, writer_key: WriterKey | None) -> str:
    """This writer's id: the one given, else its key's, else ``host/pid/random``.

    Raises:
        ConfigurationError: the key is another writer's, or the id holds U+0000.
    """
    if writer_key is not None and writer_id is not None and writer_key.writer_id != writer_id:
        raise ConfigurationError(
            f"the writer key is for writer {writer_key.writer_id!r}, not {writer_id!r}"
        )
    chosen = (
        writer_id
        or (writer_key.writer_id if writer_key is not None else None)
        or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
    )
    if "\x00" in chosen:
        raise ConfigurationError("writer_id must not contain U+0000")
    return chosen


def described(base: ClientConfig, settings: KafkaJournalSettings) -> TopicInfo:
    """The journal topic's description.

    Raises:
        TopicNotFoundError / JournalUnavailableError: from :func:`describe`.
        TopicConfigError: the topic compacts its log (that would erase history).
    """
    admin = AdminClient(with_logger(base))
    info = describe(
        admin,
        settings.topic,
        bootstrap=settings.bootstrap_servers,
        timeout=settings.startup_timeout_s,
        principal=settings.client.get("sasl.username"),
    )
    if info.compacted:
        raise TopicConfigError(compaction_refusal(settings.topic), topic=settings.topic)
    return info


def journal_producer(base: ClientConfig, ack_timeout_s: float, max_event_bytes: int) -> Producer:
    """The journal's producer: acknowledged by every in-sync replica, idempotent, keyed by
    saga, giving up on an event after the ack timeout (settings a client may not weaken)."""
    ack_ms = int(ack_timeout_s * 1000)
    return Producer(
        with_logger(
            {
                "linger.ms": 0,
                "batch.size": min(max_event_bytes, PRODUCER_MAX_MESSAGE_BYTES),
                **base,
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "message.timeout.ms": ack_ms,
                "request.timeout.ms": min(ack_ms, 30_000),
            }
        )
    )
