"""Scanning one partition of the journal topic: its messages between two offsets, in offset
order, within a deadline.

A scan stops at the partition's end as of its start (every event acknowledged before it began
is read), rides through a leader change while it asks where the partition ends, and fails as
:class:`~sagacity.errors.JournalUnavailableError` past its deadline.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sagacity.errors import JournalUnavailableError
from sagacity.producer._clients import kafka_reason, topic_unreadable, with_logger
from sagacity.signing._writer_signature import HEADER as WRITER_SIGNATURE_HEADER


@dataclass
class Span:
    """Where one scan starts, and (once it has started) where it stops."""

    start: int
    end: int = 0


_TRANSIENT_WATERMARK_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # A leader election in progress (KIP-207), and leader epochs moving with it.
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        # The client dropped its handle of a broker that left the cluster's metadata (killed)
        # while the request was in flight; the request goes to the new leader next time.
        KafkaError._DESTROY_BROKER,
        KafkaError._TRANSPORT,
    }
)
"""Errors of a watermark query that a leader change causes, retried until the read's deadline."""


def writer_signature(message: Message) -> bytes | None:
    """The message's writer signature header, if any (docs/adr/0014 §3)."""
    for header in message.headers() or ():
        if header[0] == WRITER_SIGNATURE_HEADER:
            value = header[1]
            return value if isinstance(value, bytes) else None
    return None


def message_offset(message: Message) -> int:
    """The message's offset (-1 when it has none)."""
    offset = message.offset()
    return -1 if offset is None else offset


class PartitionScanner:
    """Scans the journal topic's partitions, one at a time, on one consumer; thread-safe.

    Args:
        config: librdkafka settings (``bootstrap.servers`` and any TLS/SASL settings).
        topic: the journal topic.
        timeout: the longest one scan may take.
    """

    def __init__(
        self, config: Mapping[str, str | int | float | bool], topic: str, *, timeout: float
    ) -> None:
        self._topic = topic
        self._timeout = timeout
        self._bootstrap = str(config.get("bootstrap.servers", ""))
        self._lock = threading.Lock()
        self.messages_read = 0
        """Messages consumed from Kafka so far (what the scans cost)."""
        self._consumer = Consumer(
            with_logger(
                {
                    **config,
                    "group.id": f"sagacity-reader-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                    "enable.partition.eof": False,
                    # A scan reads what is there and stops; a long fetch poll would delay the next
                    # scan's watermark query on the same connection by up to its wait.
                    "fetch.wait.max.ms": 10,
                    **{k: v for k, v in config.items() if k == "fetch.wait.max.ms"},
                }
            )
        )

    def unavailable(self, detail: str, exc: BaseException | None = None) -> JournalUnavailableError:
        """The error saying the topic cannot be read (``exc``: its cause)."""
        error = topic_unreadable(self._topic, self._bootstrap, detail)
        error.__cause__ = exc
        return error

    def watermarks(self, tp: TopicPartition, deadline: float) -> tuple[int, int]:
        """The partition's low and high watermarks, asked again through a leader change until
        ``deadline`` (a ``time.monotonic()`` value).

        Raises:
            JournalUnavailableError: another error, or still failing at the deadline.
        """
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    tp, timeout=max(0.1, deadline - time.monotonic()), cached=False
                )
                return int(low), int(high)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                # Leadership moves (a new topic, a restarted, killed or fenced broker) are
                # transient: the next leader answers once the cluster has elected it.
                transient = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _TRANSIENT_WATERMARK_ERRORS
                )
                if not transient or time.monotonic() + 0.1 >= deadline:
                    raise self.unavailable(kafka_reason(exc), exc) from exc
                time.sleep(0.1)

    def scan(self, partition: int, span: Span, until_offset: int | None) -> Iterator[Message]:
        """The partition's messages from ``span.start`` (or its low watermark, if later) to
        ``until_offset`` or its end; sets ``span.end`` to the offset the read stops at.

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        deadline = time.monotonic() + self._timeout
        with self._lock:
            tp = TopicPartition(self._topic, partition)
            low, high = self.watermarks(tp, deadline)
            start = max(low, span.start)
            end = high if until_offset is None else min(high, until_offset + 1)
            span.end = max(start, end)
            if end <= start:
                return
            self._consumer.assign([TopicPartition(self._topic, partition, start)])
            try:
                yield from self._consume(tp, partition, start, end, deadline)
            finally:
                self._consumer.unassign()

    def _consume(
        self, tp: TopicPartition, partition: int, start: int, end: int, deadline: float
    ) -> Iterator[Message]:
        position = start
        while position < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.unavailable(
                    f"partition {partition} not read to offset {end} in {self._timeout}s"
                )
            # consume() returns early only once it has num_messages: ask for exactly
            # what is left so a short read does not wait out the timeout.
            batch = self._consumer.consume(
                num_messages=max(1, min(1000, end - position)),
                timeout=min(remaining, 0.5),
            )
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise self.unavailable(str(error), KafkaException(error))
                offset = message_offset(message)
                if offset >= end:
                    position = end
                    break
                position = offset + 1
                self.messages_read += 1
                yield message
            if not batch:
                # Control records (transaction markers) occupy offsets without
                # messages: trust the consumer's position.
                current = self._consumer.position([tp])[0].offset
                if current >= 0:
                    position = max(position, current)

    def close(self) -> None:
        """Release the consumer."""
        with self._lock:
            self._consumer.close()
