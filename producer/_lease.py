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

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import JournalUnavailableError, LeaseHeldError, SagaNotLiveError
from sagacity.ports import SagaRead
from sagacity.producer._clients import with_logger
from sagacity.signing._writer_roles import HANDOFF_TAKEOVER as HANDOFF_TAKEOVER


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


def judge_lease(
    read: SagaRead,
    *,
    config: Mapping[str, str | int | float | bool],
    topic: str,
    read_timeout_s: float,
    now_s: float,
    max_clock_skew_s: float,
) -> LeaseView:
    """The lease of the live saga ``read`` holds, judged at ``now_s`` on the taker's wall clock
    against the broker timestamp of its last accepted event.

    Raises:
        SagaNotLiveError: no writer holds the saga (unknown, handed off or ended).
        JournalUnavailableError: the last event's timestamp could not be read.
    """
    owner = read.ownership
    if not owner.live or owner.opened_seq is None:
        what = "has no events" if not read.entries else "is not held by any writer"
        raise SagaNotLiveError(
            f"saga {read.saga_id!r} {what}: there is no writer to take it from",
            saga_id=read.saga_id,
        )
    stamp = message_timestamp_ms(
        config, topic, read.partition, read.offsets[-1], timeout=read_timeout_s
    )
    return lease_view(
        opened=read.entries[owner.opened_seq - 1],
        last=read.entries[-1],
        last_timestamp_ms=stamp,
        now_s=now_s,
        max_clock_skew_s=max_clock_skew_s,
    )


def lease_held(saga_id: str, view: LeaseView, max_clock_skew_s: float) -> LeaseHeldError:
    """The refusal of a takeover (not forced) while the writer may still be alive."""
    if view.expires_in_s is None:
        why = "its SAGA_OPENED records no lease (written by an older release)"
    else:
        why = (
            f"its last event is {view.last_event_age_s:.1f}s old; the lease "
            f"({view.lease_ttl_s:g}s) plus the allowed clock skew "
            f"({max_clock_skew_s:g}s) expires in {view.expires_in_s:.1f}s"
        )
    return LeaseHeldError(
        f"saga {saga_id!r} is held by writer {view.writer!r} and may still be alive: "
        f"{why}. Nothing was appended; force only after checking the writer is gone",
        saga_id=saga_id,
    )


def takeover_draft(
    read: SagaRead, view: LeaseView, *, reason: str, actor: str, recorded_at_us: int
) -> EntryDraft:
    """The ``COMPENSATION_REQUESTED`` that takes the saga ``read`` holds from its writer
    (``handoff=takeover``, ``abandoned_writer``, ``ref_seq`` = its ``SAGA_OPENED``)."""
    lease = "forced" if not view.expired else "lease expired"
    return EntryDraft(
        saga_id=read.saga_id,
        event_type=EventType.COMPENSATION_REQUESTED,
        actor=actor,
        error=f"taken over from writer {view.writer} ({lease}): {reason}",
        attributes={
            attr.REF_SEQ: str(read.ownership.opened_seq),
            attr.HANDOFF: HANDOFF_TAKEOVER,
            attr.ABANDONED_WRITER: view.writer or "",
        },
        recorded_at_us=recorded_at_us,
    )
