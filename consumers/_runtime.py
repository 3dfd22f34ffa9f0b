"""One reliable consumer for every service: join, read, hand over, store positions, leave.

The behaviour the approvals, compensation and archive services share, and that lives here:

* **The client settings are fixed in one place** (:data:`FIXED_SETTINGS`): no automatic
  commit, no automatic offset store, ``read_committed`` (an aborted transaction's messages are
  never seen), and a group's first member starts at the earliest offset.  A service's extra
  settings (TLS, SASL, tuning) never override them.
* **A position moves only after the effect is durable.**  It is kept either by Kafka
  (:class:`KafkaCommits`: the service reports which offsets are done and only a contiguous
  prefix is committed; ``commit`` on revoke, never on a lost partition) or in a database table
  written in the same transaction as the effect (:class:`TablePositions`: read back and sought
  to on every assignment; the Kafka commit that follows is informational, for lag dashboards).
  Either way a restart, a rebalance or a crash re-reads what was not done and loses nothing.
* **Rebalances are cooperative with the work in flight**: on revoke the service first stops
  its work on the partitions (:meth:`Handler.on_revoking`), then the done positions are committed,
  then the service forgets them (:meth:`Handler.on_released`); a lost partition skips the commit,
  since another member may already own it.
* **The consumer is closed in ``finally``**, whatever ended the loop; failures the service
  names as retryable close it, wait and join the group again (the stored positions make that
  safe); anything else propagates.
* **A poison message is never retried forever and never dropped silently**: the service says
  what poison is (it alone can decode its messages), the :class:`PoisonPolicy` says where it
  goes — a dead-letter topic with its original bytes (:class:`DeadLetterTopic`), a quarantine
  table (:class:`QuarantineTable`), or a warning naming its position and a count
  (:class:`SkipAndCount`).  Its offset then counts as done.
* **Health and lag** come from the loop itself: :attr:`ConsumerRuntime.alive_at` is refreshed
  every iteration, :attr:`~ConsumerRuntime.joined` / :attr:`~ConsumerRuntime.assigned` /
  :attr:`~ConsumerRuntime.error` say where the member stands, and a lag hook is told each
  partition's distance from its high watermark once a second.

The position stores are :mod:`._positions`'s, the poison policies :mod:`._poison`'s; both are
named here too, where the services import them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sagacity.consumers._poison import (
    DeadLetterSender,
    DeadLetterTopic,
    PoisonPolicy,
    QuarantineTable,
    SkipAndCount,
)
from sagacity.consumers._positions import (
    KafkaCommits,
    Ledger,
    PositionStore,
    StoredOffsets,
    TablePositions,
)
from sagacity.errors import KafkaAccessDeniedError
from sagacity.producer import access_denied, with_logger

__all__ = [
    "FIXED_SETTINGS",
    "LAG_INTERVAL_S",
    "ConsumerRuntime",
    "DeadLetterSender",
    "DeadLetterTopic",
    "Handler",
    "KafkaCommits",
    "Ledger",
    "PoisonPolicy",
    "PositionStore",
    "QuarantineTable",
    "Redeliver",
    "RuntimeOptions",
    "SkipAndCount",
    "StoredOffsets",
    "TablePositions",
    "client_config",
]

log = logging.getLogger("sagacity.consumer")

FIXED_SETTINGS: Mapping[str, str | bool] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
}
"""The settings every service's consumer runs with; nothing a caller passes overrides them."""

LAG_INTERVAL_S = 1.0
"""Seconds between lag reports (and between the periodic commits of Kafka positions)."""


def client_config(
    *,
    bootstrap_servers: str,
    group_id: str,
    client: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    tuning: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The librdkafka settings of a service's consumer.

    Args:
        bootstrap_servers / group_id: where and as which group.
        client: the operator's extra settings (TLS, SASL …); they override ``defaults``.
        defaults: the service's preferences an operator may override (fetch sizes …).
        tuning: the service's settings derived from its own options (session timeout,
            assignment strategy, static membership …); they override ``client``.

    :data:`FIXED_SETTINGS` come last, so nothing overrides them.
    """
    return {
        **dict(defaults or {}),
        **dict(client or {}),
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        **dict(tuning or {}),
        **FIXED_SETTINGS,
    }


# --- the service's side ---------------------------------------------------------------------
class Redeliver(Exception):  # noqa: N818 - a flow signal from a handler to the runtime
    """Raised by :meth:`Handler.handle`: nothing of the batch was stored; read it again.

    The runtime seeks each partition back to the batch's first offset and waits ``retry_s``.
    """

    def __init__(self, reason: str, *, retry_s: float = 1.0) -> None:
        super().__init__(reason)
        self.retry_s = retry_s


class Handler:
    """What a service does with the messages it is given; every hook but :meth:`handle` is
    optional.  Hooks run on the consumer's thread (rebalance hooks inside ``consume``)."""

    def handle(self, messages: Sequence[Message]) -> None:
        """Act on ``messages`` (Kafka order, errors and partition ends removed).

        Raises:
            Redeliver: nothing was stored; read the batch again.
        """
        raise NotImplementedError

    def idle(self) -> None:
        """A poll returned nothing to act on."""

    def tick(self) -> None:
        """Called once per loop iteration, before polling (timers, submitting queued work)."""

    def on_assigned(self, partitions: Sequence[int]) -> None:
        """``partitions`` are this member's now (before any message of theirs is handed over)."""

    def on_revoking(self, partitions: Sequence[int], *, lost: bool) -> None:
        """``partitions`` are going: stop work on them and record what finished."""

    def on_released(self, partitions: Sequence[int]) -> None:
        """``partitions`` are gone (their positions are committed, unless lost)."""

    def closing(self) -> None:
        """The loop ended: finish the work in flight before the last commit and the close."""


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """How a service reads.

    Attributes:
        topic: the topic.
        config: from :func:`client_config`.
        batch_size / poll_timeout_s: the most messages one ``consume`` returns and how long it
            waits for them.
        rejoin_on: failures that close the consumer, wait ``rejoin_s`` and join again (the
            positions make that safe); others propagate.
        name: names the consumer in logs.
    """

    topic: str
    config: Mapping[str, Any]
    batch_size: int = 500
    poll_timeout_s: float = 0.2
    rejoin_on: tuple[type[BaseException], ...] = ()
    rejoin_s: float = 2.0
    name: str = "consumer"


class ConsumerRuntime:
    """Runs one member of a consumer group for a service until ``stop`` is set.

    Args:
        options: see :class:`RuntimeOptions`.
        handler: the service's side.
        positions: where positions are kept.
        poison: where poison goes (:meth:`poison`).
        stop: set to end :meth:`run`.
        lag: told ``(partition, lag)`` once a second for each assigned partition.
        lag_gone: told a partition another member reports now.
    """

    def __init__(
        self,
        options: RuntimeOptions,
        handler: Handler,
        *,
        positions: PositionStore,
        poison: PoisonPolicy,
        stop: threading.Event,
        lag: Callable[[int, int], None] | None = None,
        lag_gone: Callable[[int], None] | None = None,
    ) -> None:
        for key, value in FIXED_SETTINGS.items():
            if options.config.get(key) != value:
                raise ValueError(f"consumer setting {key!r} must be {value!r}")
        self.options = options
        self.handler = handler
        self.positions = positions
        self.policy = poison
        self.stop = stop
        self._lag = lag
        self._lag_gone = lag_gone
        self._consumer: Consumer | None = None
        self._assigned: set[int] = set()
        self._paused = False
        self.alive_at = time.monotonic()
        self.joined = False
        self.error: str | None = None

    # --- state ------------------------------------------------------------------------------
    @property
    def assigned(self) -> tuple[int, ...]:
        """Partitions this member reads now."""
        return tuple(sorted(self._assigned))

    @property
    def consumer(self) -> Consumer | None:
        """The client, while :meth:`run` holds one."""
        return self._consumer

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Join, read and hand over until ``stop`` is set; the consumer is closed in ``finally``.

        Raises:
            KafkaAccessDeniedError: Kafka refused the principal (its group or topic ACL):
                never rejoined, an operator must grant it.
            KafkaException: a fatal client error.
            whatever the handler raises that ``rejoin_on`` does not name.
        """
        while not self.stop.is_set():
            try:
                self._run_once()
                self.error = None
                return
            except KafkaAccessDeniedError as exc:
                self.error = exc.message
                raise
            except self.options.rejoin_on as exc:
                # Nothing failed was stored: rejoining re-reads it from the stored position.
                self.error = str(exc)
                log.error(
                    "the %s failed, rejoining in %.0fs: %s",
                    self.options.name,
                    self.options.rejoin_s,
                    exc,
                )
                self._assigned.clear()
                self.stop.wait(self.options.rejoin_s)

    def _run_once(self) -> None:
        o = self.options
        consumer = Consumer(with_logger(o.config))
        self._consumer = consumer
        self._paused = False
        next_lag = 0.0
        try:
            consumer.subscribe(
                [o.topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            while not self.stop.is_set():
                self.alive_at = time.monotonic()
                self.handler.tick()
                messages = consumer.consume(num_messages=o.batch_size, timeout=o.poll_timeout_s)
                if time.monotonic() >= next_lag:
                    self._commit_ready(asynchronous=True)
                    self._report_lag()
                    next_lag = time.monotonic() + LAG_INTERVAL_S
                batch = self._readable(messages, o)
                if not batch:
                    self.handler.idle()
                    continue
                try:
                    self.handler.handle(batch)
                except Redeliver as again:
                    self._rewind(batch)
                    self.stop.wait(again.retry_s)
                    continue
                self.error = None
                self._after(batch)
        finally:
            try:
                self.handler.closing()
                if self.positions.in_kafka:
                    try:
                        self._commit_ready(asynchronous=False)
                    except KafkaException as exc:
                        log.info("last commit failed: %s", exc)
            finally:
                # Closing revokes what is left (the revoke hooks still see the client).
                consumer.close()
                self._consumer = None

    @staticmethod
    def _readable(messages: Sequence[Message], options: RuntimeOptions) -> list[Message]:
        batch: list[Message] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                doing = (
                    f"reading topic {options.topic!r} as group {options.config.get('group.id')!r}"
                )
                denied = access_denied(error, options.config, doing=doing)
                if denied is not None:
                    raise denied
                if error.fatal():
                    raise KafkaException(error)
                log.warning("consumer error: %s", error)
                continue
            if message.partition() is None or message.offset() is None:
                continue
            batch.append(message)
        return batch

    def _after(self, batch: Sequence[Message]) -> None:
        if self.positions.in_kafka:
            self._commit_ready(asynchronous=True)
            return
        # The table holds the position; Kafka's copy is for lag dashboards only.
        nexts: dict[int, int] = {}
        for message in batch:
            nexts[message.partition() or 0] = (message.offset() or 0) + 1
        consumer = self._consumer
        if consumer is None:
            return
        try:
            consumer.commit(
                offsets=[TopicPartition(self.options.topic, p, o) for p, o in nexts.items()],
                asynchronous=True,
            )
        except KafkaException as exc:
            log.debug("informational offset commit failed (harmless): %s", exc)

    def _rewind(self, batch: Sequence[Message]) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        firsts: dict[int, int] = {}
        for message in batch:
            firsts.setdefault(message.partition() or 0, message.offset() or 0)
        for partition, offset in firsts.items():
            consumer.seek(TopicPartition(self.options.topic, partition, offset))

    # --- what the service calls -------------------------------------------------------------
    def poison(
        self,
        message: Message,
        *,
        reason: str,
        detail: str,
        go_on: Callable[[], bool] | None = None,
    ) -> bool:
        """Hand ``message`` to the poison policy; ``True`` once it is dealt with.

        Args:
            go_on: whether to keep trying (by default: until ``stop``).
        """
        keep = go_on if go_on is not None else (lambda: not self.stop.is_set())
        return self.policy.park(message, reason=reason, detail=detail, go_on=keep)

    def hold(self, busy: bool) -> None:
        """Pause every assigned partition while ``busy`` (back-pressure); resume after."""
        consumer = self._consumer
        if consumer is None or busy == self._paused:
            return
        assignment = consumer.assignment()
        (consumer.pause if busy else consumer.resume)(assignment)
        self._paused = busy

    def _commit_ready(self, *, asynchronous: bool, only: Collection[int] | None = None) -> None:
        consumer = self._consumer
        if consumer is None or not self.positions.in_kafka:
            return
        ready = self.positions.ready(only)
        if not ready:
            return
        offsets = [TopicPartition(self.options.topic, p, o) for p, o in ready.items()]
        if asynchronous:
            consumer.commit(offsets=offsets, asynchronous=True)
        else:
            consumer.commit(offsets=offsets, asynchronous=False)

    def _report_lag(self) -> None:
        consumer = self._consumer
        if consumer is None or self._lag is None:
            return
        for number in sorted(self._assigned):
            tp = TopicPartition(self.options.topic, number)
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            done = self.positions.done(number) if self.positions.done is not None else None
            if done is None:
                position = consumer.position([tp])[0].offset
                done = position if position is not None and position >= 0 else 0
            self._lag(number, max(0, high - done))

    # --- rebalance --------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if isinstance(self.positions, TablePositions):
            stored = self.positions.starting(self.options.topic, self.stop)
            if self.stop.is_set() and not stored:
                return
            unknown = self.positions.unknown
            for tp in partitions:
                if tp.partition in stored:
                    tp.offset = stored[tp.partition]
                elif unknown is not None:
                    tp.offset = unknown
        numbers = [tp.partition for tp in partitions]
        self.handler.on_assigned(numbers)
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self._assigned |= set(numbers)
        self.joined = True
        log.info(
            "assigned partitions %s of %s (%s; start offsets %s, negative: the group's or the"
            " earliest)",
            sorted(numbers),
            self.options.topic,
            self.options.name,
            {tp.partition: tp.offset for tp in partitions},
        )

    @property
    def _cooperative(self) -> bool:
        return self.options.config.get("partition.assignment.strategy") == "cooperative-sticky"

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._leave(consumer, partitions, lost=False)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._leave(consumer, partitions, lost=True)

    def _leave(self, consumer: Consumer, partitions: list[TopicPartition], *, lost: bool) -> None:
        numbers = sorted(tp.partition for tp in partitions)
        if lost:
            log.warning("lost partitions %s (%s)", numbers, self.options.name)
        else:
            log.info("revoking partitions %s (%s)", numbers, self.options.name)
        self.handler.on_revoking(numbers, lost=lost)
        if not lost and self.positions.in_kafka:
            try:
                self._commit_ready(asynchronous=False, only=set(numbers))
            except KafkaException as exc:
                log.info("commit on revoke failed: %s", exc)
        self.handler.on_released(numbers)
        self._assigned -= set(numbers)
        if self._lag_gone is not None:
            for number in numbers:
                self._lag_gone(number)
        # The client unassigns them when the callback returns (confluent-kafka's fallback).
        del consumer
