"""The writer lease: when a live saga's writer may be presumed gone (docs/adr/0011-writer-lease.md).

A writer records its lease (``lease_ttl_s``) on the ``SAGA_OPENED`` it writes and appends
without re-reading the topic only while its last acknowledged event is younger than the lease
minus a margin, on its own monotonic clock.  Another process may take the saga over only when
the broker timestamp of the saga's last accepted event is older than that lease plus the
largest clock skew allowed, on the taker's wall clock.  This module holds the taker's half.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from sagacity import _attributes as attr
from sagacity._events import JournalEntry
from sagacity._writer_roles import HANDOFF_TAKEOVER as HANDOFF_TAKEOVER
from sagacity.errors import JournalUnavailableError
from sagacity.producer._clients import with_logger


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    """What a taker knows about a live saga's lease.

    Attributes:
        writer: the writer that holds (or held) the saga.
        lease_ttl_s: the lease its ``SAGA_OPENED`` recorded; ``None`` when it recorded none
            (a writer of an older release: it never promised to stop).
        last_seq: the seq of the saga's last accepted event.
        last_event_age_s: how old that event's broker timestamp is on the taker's wall clock.
        expires_in_s: seconds until a takeover is allowed (``<= 0``: allowed now);
            ``None`` without a recorded lease.
    """

    writer: str | None
    lease_ttl_s: float | None
    last_seq: int
    last_event_age_s: float
    expires_in_s: float | None

    @property
    def expired(self) -> bool:
        """Whether the writer may be presumed gone."""
        return self.expires_in_s is not None and self.expires_in_s <= 0


@dataclass(frozen=True, kw_only=True)
class Takeover:
    """A confirmed takeover.

    Attributes:
        entry: the ``COMPENSATION_REQUESTED`` that handed the saga to compensation.
        lease: the lease as the taker judged it.
        forced: taken although the lease had not expired (an operator's decision).
    """

    entry: JournalEntry
    lease: LeaseView
    forced: bool


def recorded_lease(opened: JournalEntry) -> float | None:
    """The lease a ``SAGA_OPENED`` recorded, in seconds; ``None`` if absent or unreadable."""
    raw = opened.attributes.get(attr.LEASE_TTL_S)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def lease_view(
    *,
    opened: JournalEntry,
    last: JournalEntry,
    last_timestamp_ms: int,
    now_s: float,
    max_clock_skew_s: float,
) -> LeaseView:
    """Judge the lease of the saga opened by ``opened`` whose last accepted event is ``last``."""
    ttl = recorded_lease(opened)
    age = now_s - last_timestamp_ms / 1000.0
    return LeaseView(
        writer=opened.actor,
        lease_ttl_s=ttl,
        last_seq=last.seq,
        last_event_age_s=age,
        expires_in_s=None if ttl is None else ttl + max_clock_skew_s - age,
    )


def message_timestamp_ms(
    config: Mapping[str, str | int | float | bool],
    topic: str,
    partition: int,
    offset: int,
    *,
    timeout: float,
) -> int:
    """The broker timestamp (message timestamp, milliseconds) of one message.

    Raises:
        JournalUnavailableError: the message could not be read within ``timeout``, or it
            carries no timestamp.
    """
    consumer = Consumer(
        with_logger(
            {
                **config,
                "group.id": f"sagacity-lease-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            message = consumer.poll(min(remaining, 0.5))
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise JournalUnavailableError(
                    f"cannot read {topic}/{partition}@{offset}: {error.str()}"
                ) from KafkaException(error)
            if message.offset() != offset:
                continue
            kind, stamp = message.timestamp()
            if kind == 0 or stamp is None or stamp < 0:  # TIMESTAMP_NOT_AVAILABLE
                raise JournalUnavailableError(
                    f"{topic}/{partition}@{offset} carries no timestamp: the lease cannot be judged"
                )
            return int(stamp)
        raise JournalUnavailableError(
            f"{topic}/{partition}@{offset} was not read within {timeout:.1f}s"
        )
    finally:
        consumer.close()
