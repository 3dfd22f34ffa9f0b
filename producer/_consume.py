"""The services' consumer runtime on Kafka: join, read, hand over, store positions, leave
(docs/adr/0023-consumer-runtime.md; the port: :mod:`sagacity.ports._consume`).

The client's side of what the approvals, compensation and archive services share, and that
lives here:

* **The client settings are fixed in one place** (:data:`FIXED_SETTINGS`): no automatic
  commit, no automatic offset store, ``read_committed`` (an aborted transaction's messages are
  never seen), and a group's first member starts at the earliest offset.  A service's extra
  settings (TLS, SASL, tuning) never override them.
* **A position moves only after the effect is durable.**  It is kept either by Kafka (the
  service's :class:`~sagacity.ports.PositionStore` says which offsets are ready; they are
  committed after each batch, once a second, synchronously on revoke, never on a lost
  partition) or in a table of the service's, written in the transaction of the effect (read
  back and sought to on every assignment; the Kafka commit that follows is informational, for
  lag dashboards).  Either way a restart, a rebalance or a crash re-reads what was not done
  and loses nothing.
* **Rebalances are cooperative with the work in flight**: on revoke the service first stops
  its work on the partitions (:meth:`Handler.on_revoking`), then the done positions are
  committed, then the service forgets them (:meth:`Handler.on_released`); a lost partition
  skips the commit, since another member may already own it.
* **The consumer is closed in ``finally``**, whatever ended the loop; failures the service
  names as retryable close it, wait and join the group again (the stored positions make that
  safe); a refusal of the principal (:func:`access_denied`) and a fatal client error
  propagate.
* **A poison message** goes where the service's :class:`~sagacity.ports.PoisonPolicy` says
  (:meth:`ConsumerRuntime.poison`); its offset then counts as done.
* **Health and lag** come from the loop itself: :attr:`ConsumerRuntime.alive_at` is refreshed
  every iteration, :attr:`~ConsumerRuntime.joined` / :attr:`~ConsumerRuntime.assigned` /
  :attr:`~ConsumerRuntime.error` say where the member stands, and a lag hook is told each
  partition's distance from its high watermark once a second.

:class:`KafkaConsumers` is the port's implementation the composition root hands the services.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sagacity.errors import KafkaAccessDeniedError
from sagacity.ports import (
    DeadLetterSender,
    Handler,
    PoisonPolicy,
    PositionStore,
    Record,
    Redeliver,
    RuntimeOptions,
)
from sagacity.producer._clients import with_logger
from sagacity.producer._deadletter import DeadLetters, ensure_dead_letter_topic
from sagacity.producer._denied import access_denied

__all__ = [
    "FIXED_SETTINGS",
    "LAG_INTERVAL_S",
    "ConsumerRuntime",
    "KafkaConsumers",
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
        handler: Handler[Any],
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
        message: Record,
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
        if not self.positions.in_kafka:
            # The service's table holds the positions: seek there, whatever Kafka says.
            stored = self.positions.starting(self.options.topic, self.stop)
            if self.stop.is_set() and not stored:
                return
            for tp in partitions:
                if tp.partition in stored:
                    tp.offset = stored[tp.partition]
                elif self.positions.from_beginning:
                    tp.offset = OFFSET_BEGINNING
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


class KafkaConsumers:
    """The services' consumer runtime on Kafka (:class:`~sagacity.ports.Consumers`): what the
    composition root hands a service as ``Dependencies.consumers``."""

    transport_errors: tuple[type[BaseException], ...] = (KafkaException,)
    """The client's failures (a broker away, a fatal client error), for a service's
    ``rejoin_on``."""

    def client_config(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        client: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        tuning: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """:func:`client_config`."""
        return client_config(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            client=client,
            defaults=defaults,
            tuning=tuning,
        )

    def runtime(
        self,
        options: RuntimeOptions,
        handler: Handler[Any],
        *,
        positions: PositionStore,
        poison: PoisonPolicy,
        stop: threading.Event,
        lag: Callable[[int, int], None] | None = None,
        lag_gone: Callable[[int], None] | None = None,
    ) -> ConsumerRuntime:
        """A :class:`ConsumerRuntime` running ``handler``."""
        return ConsumerRuntime(
            options,
            handler,
            positions=positions,
            poison=poison,
            stop=stop,
            lag=lag,
            lag_gone=lag_gone,
        )

    def dead_letters(
        self, config: Mapping[str, Any], topic: str, *, timeout_s: float = 15.0
    ) -> DeadLetterSender:
        """The dead-letter topic ``topic``, created when missing (:func:`ensure_dead_letter_topic`,
        waiting up to ``timeout_s``), and its publisher (:class:`DeadLetters`)."""
        ensure_dead_letter_topic(config, topic, timeout=timeout_s)
        return DeadLetters(config, topic)
