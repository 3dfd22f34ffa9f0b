"""The consumer-group side: fold journal events from the topic into the working table.

Replicas share one consumer group, so each partition is folded by one replica at a time.  The
position is stored in PostgreSQL in the same transaction as the rows a batch produced
(``sagacity_approval_offset``) and read back on assignment, so a restart or rebalance neither
loses nor double-applies an event (and folding is idempotent anyway).  An undecodable message
is counted, logged with its position and skipped: it can never be part of a chain.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sagacity._defaults import DEFAULT_APPROVALS_GROUP as DEFAULT_GROUP
from sagacity.consumers.approvals._store import ApprovalStore, apply_entry
from sagacity.errors import SagacityError, SerializationError
from sagacity.producer._clients import with_logger
from sagacity.schemas import decode_entry

log = logging.getLogger("sagacity.approvals")

RETRY_S = 2.0
"""Seconds between a failed batch and rejoining the group."""


class RequestConsumer:
    """Folds the journal topic into ``sagacity_approval_request`` on a background thread.

    Args:
        store: the working table.
        bootstrap_servers / topic / group_id: where to read and as which group.
        client: extra librdkafka settings (TLS/SASL).
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        bootstrap_servers: str,
        topic: str,
        group_id: str = DEFAULT_GROUP,
        client: Mapping[str, str] | None = None,
    ) -> None:
        self._store = store
        self._topic = topic
        self._config: dict[str, Any] = {
            **dict(client or {}),
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.applied = 0
        self.skipped = 0
        self.error: str | None = None
        self._assigned: set[int] = set()

    @property
    def alive(self) -> bool:
        """The folding thread is running."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def assigned(self) -> tuple[int, ...]:
        """Partitions this replica folds now."""
        return tuple(sorted(self._assigned))

    def start(self) -> None:
        """Start folding on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="sagacity-approvals-consumer")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop folding and leave the group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        stored = self._store.offsets(self._topic)
        for tp in partitions:
            if tp.partition in stored:
                tp.offset = stored[tp.partition]
        consumer.assign(partitions)
        self._assigned |= {tp.partition for tp in partitions}
        log.info("folding partitions %s of %s", sorted(self._assigned), self._topic)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned -= {tp.partition for tp in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
                self.error = None
            except (KafkaException, SagacityError) as exc:
                # A batch that failed was not stored: rejoining re-reads it from the stored
                # position, so a database or broker outage delays folding and loses nothing.
                self.error = str(exc)
                log.error("the approvals consumer failed, rejoining in %.0fs: %s", RETRY_S, exc)
                self._assigned.clear()
                self._stop.wait(RETRY_S)

    def _consume(self) -> None:
        consumer = Consumer(with_logger(self._config))
        try:
            consumer.subscribe(
                [self._topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_revoke,
            )
            while not self._stop.is_set():
                batch = consumer.consume(num_messages=500, timeout=0.2)
                if batch:
                    self._fold(consumer, batch)
                    self.error = None
        finally:
            consumer.close()

    def _fold(self, consumer: Consumer, batch: list[Message]) -> None:
        positions: dict[int, int] = {}
        applied = skipped = 0
        with self._store.connect() as conn:
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", error)
                    continue
                partition = message.partition()
                offset = message.offset()
                if partition is None or offset is None:
                    continue
                positions[partition] = offset + 1
                try:
                    entry = decode_entry(message.value() or b"")
                except SerializationError as exc:
                    skipped += 1
                    log.warning(
                        "skipping undecodable message at %s[%d]@%d: %s",
                        self._topic,
                        partition,
                        offset,
                        exc,
                    )
                    continue
                apply_entry(conn, entry, topic=self._topic)
                applied += 1
            for partition, next_offset in positions.items():
                self._store.store_offset(conn, self._topic, partition, next_offset)
        # Counted once the transaction committed: a failed batch is folded again later.
        self.applied += applied
        self.skipped += skipped
        # Kafka's own committed position is informational (lag dashboards); the table's wins.
        commits = [TopicPartition(self._topic, p, o) for p, o in positions.items()]
        if commits:
            try:
                consumer.commit(offsets=commits, asynchronous=True)
            except KafkaException as exc:
                log.info("could not commit consumer offsets to Kafka: %s", exc)
