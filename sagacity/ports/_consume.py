"""The services' consumer runtime as a port: run a service's handler over the records of a topic
(docs/adr/0023-consumer-runtime.md).

A service is a :class:`Handler` (what it does with a batch of :class:`Record` s, and its
optional hooks), a :class:`PositionStore` (where its positions are kept) and a
:class:`PoisonPolicy` (where a record it cannot act on goes); :class:`Consumers`, handed by the
composition root (Kafka: ``sagacity.producer.KafkaConsumers``), runs it as one member of a
consumer group (:class:`ConsumerLoop`).  The rules of the services' side (the position stores,
the poison policies) live in ``sagacity/consumers/`` and are written against this module; the
client (its settings, polling, commits, rebalances, the dead-letter producer) is the adapter's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

RecordHeaders = Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]]
"""A record's headers as its transport gives them: pairs in order, or a mapping."""


class Record(Protocol):
    """One record of a topic, as a service reads it (Kafka: a ``confluent_kafka.Message``)."""

    def key(self) -> bytes | None:
        """The record's key (a journal event's: its saga id)."""
        ...

    def value(self) -> bytes | None:
        """The record's bytes."""
        ...

    def headers(self) -> RecordHeaders | None:
        """The record's headers, ``None`` for none."""
        ...

    def topic(self) -> str | None:
        """The topic it was read from."""
        ...

    def partition(self) -> int | None:
        """Its partition."""
        ...

    def offset(self) -> int | None:
        """Its offset in the partition."""
        ...


RecordT = TypeVar("RecordT", bound=Record)
"""The record type a :class:`Handler` reads (a service names :class:`Record`)."""


class Redeliver(Exception):  # noqa: N818 - a flow signal from a handler to the runtime
    """Raised by :meth:`Handler.handle`: nothing of the batch was stored; read it again.

    The runtime seeks each partition back to the batch's first offset and waits ``retry_s``.
    """

    def __init__(self, reason: str, *, retry_s: float = 1.0) -> None:
        super().__init__(reason)
        self.retry_s = retry_s


class Handler(Generic[RecordT]):
    """What a service does with the records it is given; every hook but :meth:`handle` is
    optional.  Hooks run on the consumer's thread (rebalance hooks inside its poll)."""

    def handle(self, messages: Sequence[RecordT]) -> None:
        """Act on ``messages`` (the topic's order, errors and partition ends removed).

        Raises:
            Redeliver: nothing was stored; read the batch again.
        """
        raise NotImplementedError

    def idle(self) -> None:
        """A poll returned nothing to act on."""

    def tick(self) -> None:
        """Called once per loop iteration, before polling (timers, submitting queued work)."""

    def on_assigned(self, partitions: Sequence[int]) -> None:
        """``partitions`` are this member's now (before any record of theirs is handed over)."""

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
        config: the client's settings, from :meth:`Consumers.client_config`.
        batch_size / poll_timeout_s: the most records one poll returns and how long it
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


class PositionStore(Protocol):
    """Where a service's positions are kept, as the runtime reads them
    (``sagacity.consumers``: ``KafkaCommits`` or ``TablePositions``)."""

    @property
    def in_kafka(self) -> bool:
        """The transport's commits are the positions (``False``: a table of the service's
        is, and the transport's commits are informational)."""
        ...

    @property
    def from_beginning(self) -> bool:
        """A partition :meth:`starting` does not name starts at its first record (``False``:
        at the group's committed position)."""
        ...

    @property
    def done(self) -> Callable[[int], int | None] | None:
        """A partition's position as far as the work is done (for lag), if known."""
        ...

    def ready(self, only: Collection[int] | None) -> Mapping[int, int]:
        """The next offset to commit per partition (of ``only``, or all) changed since the
        last call."""
        ...

    def starting(self, topic: str, stop: threading.Event) -> Mapping[int, int]:
        """The next offset to read per partition of ``topic`` on an assignment (``{}`` when
        ``stop`` is set first)."""
        ...


class PoisonPolicy(Protocol):
    """Where a record the service cannot act on goes."""

    def park(self, message: Record, *, reason: str, detail: str, go_on: Callable[[], bool]) -> bool:
        """Deal with ``message`` once; ``True`` when done (its offset may then count as done).

        ``go_on`` is asked before every attempt; ``False`` from it abandons the record
        (shutdown, partition revoked) and ``park`` returns ``False``.
        """
        ...


class DeadLetterSender(Protocol):
    """Publishes one record to a dead-letter topic and waits for the acknowledgement."""

    def send(self, message: Record, *, reason: str, detail: str) -> None:
        """Park ``message`` (its key, value and headers unchanged) with ``reason``.

        Raises:
            JournalError: the broker did not acknowledge.
        """
        ...

    def close(self) -> None:
        """Flush and release the producer."""
        ...


class ConsumerLoop(Protocol):
    """One member of a consumer group running a service's :class:`Handler`."""

    @property
    def assigned(self) -> tuple[int, ...]:
        """Partitions this member reads now."""
        ...

    @property
    def alive_at(self) -> float:
        """When the loop last went round (``time.monotonic()``)."""
        ...

    @property
    def joined(self) -> bool:
        """The member was assigned partitions at least once."""
        ...

    @property
    def error(self) -> str | None:
        """Why the member last failed, while it rejoins; ``None`` while reading."""
        ...

    def run(self) -> None:
        """Join, read and hand over until the loop's ``stop`` is set; the client is closed
        whatever ended it.

        Raises:
            KafkaAccessDeniedError: the transport refused the principal (never rejoined).
            one of :attr:`Consumers.transport_errors`: a fatal client error.
            whatever the handler raises that ``rejoin_on`` does not name.
        """
        ...

    def poison(
        self,
        message: Record,
        *,
        reason: str,
        detail: str,
        go_on: Callable[[], bool] | None = None,
    ) -> bool:
        """Hand ``message`` to the poison policy; ``True`` once it is dealt with (by default
        tried until ``stop``)."""
        ...

    def hold(self, busy: bool) -> None:
        """Pause every assigned partition while ``busy`` (back-pressure); resume after."""
        ...


class Consumers(Protocol):
    """Runs services' handlers over a topic's records: the transport's side of the consumer
    runtime, handed to a service by the composition root (``Dependencies.consumers``)."""

    @property
    def transport_errors(self) -> tuple[type[BaseException], ...]:
        """The client's failures (a broker away, a fatal client error): what a service names
        in ``RuntimeOptions.rejoin_on`` to rejoin after them."""
        ...

    def client_config(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        client: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        tuning: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A service's consumer settings: its ``defaults`` (an operator may override them),
        the operator's ``client`` settings (TLS, SASL …), the service's own ``tuning``, and
        last the runtime's fixed settings, which nothing overrides."""
        ...

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
    ) -> ConsumerLoop:
        """A member running ``handler`` over ``options.topic`` until ``stop`` is set.

        Args:
            lag: told ``(partition, lag)`` once a second for each assigned partition.
            lag_gone: told a partition another member reports now.

        Raises:
            ValueError: ``options.config`` changes a fixed setting.
        """
        ...

    def dead_letters(
        self, config: Mapping[str, Any], topic: str, *, timeout_s: float = 15.0
    ) -> DeadLetterSender:
        """The publisher of the dead-letter topic ``topic`` (created, never compacted, when
        missing) on the client settings ``config``.

        Raises:
            KafkaAccessDeniedError: the principal may not see or create the topic.
            JournalUnavailableError: the cluster refused or did not answer.
        """
        ...
