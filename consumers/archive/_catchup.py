"""Sign now, outside the service: read the topic up to its end as the archiver does, then sign
what was read (``sagacity archive checkpoint``).

A signer signs only heads its own process read from the topic (docs/adr/0012-checkpoint-rounds.md,
"The signer's input"), so signing "what the archive holds" is not possible from the database
alone.  This reads each partition from its ``signed_offset`` (what was archived since the last
complete signing pass is read again and re-verified; anything newer is archived as the service
would), up to the high watermark it found on start, and signs.  It takes no part in the
service's consumer group (partitions are assigned, not subscribed), so a running archiver keeps
its partitions; both may archive the same new messages (the heads' compare-and-set makes one a
duplicate).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from sagacity.consumers.archive._checkpoints import SignedRound, Signer, sign_pending
from sagacity.consumers.archive._ingest import BatchArchiver, RawEvent
from sagacity.errors import JournalUnavailableError
from sagacity.producer import client_config, topic_unreadable, with_logger


def _headers(message: Any) -> dict[str, bytes]:
    return {k: v for k, v in (message.headers() or ()) if isinstance(v, bytes)}


@dataclass(frozen=True, kw_only=True)
class CatchUp:
    """What a catch-up did: messages read (of which read again), heads signed."""

    read: int
    again: int
    archived: int
    signed: int


def _assigned_from_signed(
    consumer: Consumer,
    archiver: BatchArchiver,
    topic: str,
    numbers: Sequence[int],
    *,
    timeout_s: float,
) -> dict[int, int]:
    """Assign ``consumer`` each partition from the archiver's signed offset (its start when
    none) where messages remain; the end offset of each."""
    starts = archiver.start_offsets(topic)
    ends: dict[int, int] = {}
    assignment = []
    for number in numbers:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, number), timeout=min(timeout_s, 30.0)
        )
        start = max(starts.get(number, low), low)
        if start < high:
            ends[number] = high
            assignment.append(
                TopicPartition(topic, number, start if number in starts else OFFSET_BEGINNING)
            )
    consumer.assign(assignment)
    return ends


def _batch(messages: Sequence[Any], topic: str, ends: dict[int, int]) -> list[RawEvent]:
    """The messages before their partition's end, as the archiver takes them; a partition
    whose end is reached leaves ``ends``."""
    batch = []
    for m in messages:
        if m.error() is not None or m.partition() not in ends:
            continue
        partition, offset = m.partition() or 0, m.offset() or 0
        if offset >= ends[partition]:
            continue
        batch.append(
            RawEvent(
                topic=topic,
                partition=partition,
                offset=offset,
                key=m.key(),
                value=m.value(),
                headers=_headers(m),
            )
        )
        if offset + 1 >= ends[partition]:
            del ends[partition]
    return batch


def catch_up_and_sign(
    *,
    bootstrap_servers: str,
    topic: str,
    group_id: str,
    archiver: BatchArchiver,
    signer: Signer,
    kafka_config: Mapping[str, str] | None = None,
    on_round: Callable[[SignedRound], None] | None = None,
    timeout_s: float = 300.0,
) -> CatchUp:
    """Read ``topic`` from each partition's signed offset to its end into ``archiver``, then sign
    every head read (see the module).

    Raises:
        JournalUnavailableError: the topic could not be read to its end within ``timeout_s``.
    """
    consumer = Consumer(
        with_logger(
            client_config(
                bootstrap_servers=bootstrap_servers, group_id=group_id, client=kafka_config
            )
        )
    )
    read = again = archived = 0
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=min(timeout_s, 30.0))
        except KafkaException as exc:
            raise topic_unreadable(topic, bootstrap_servers, exc) from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise JournalUnavailableError(f"topic {topic!r} does not exist or cannot be read")
        numbers = sorted(found.partitions)
        archiver.partitions[topic] = len(numbers)
        ends = _assigned_from_signed(consumer, archiver, topic, numbers, timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise JournalUnavailableError(
                    f"partitions {sorted(ends)} of {topic!r} were not read to their end in "
                    f"{timeout_s:g} s; nothing was signed"
                )
            batch = _batch(consumer.consume(num_messages=2_000, timeout=0.5), topic, ends)
            if batch:
                report = archiver.archive(batch)
                read += len(batch)
                again += report.again
                archived += report.archived
            # A transaction's commit marker takes an offset but is never delivered: a
            # partition is read to its end once the consumer's position reaches it.
            if ends:
                positions = consumer.position([TopicPartition(topic, p) for p in ends])
                for tp in positions:
                    if tp.offset is not None and tp.offset >= ends.get(tp.partition, tp.offset + 1):
                        del ends[tp.partition]
    finally:
        consumer.close()
    signed = sign_pending(
        archiver.connection(),
        signer,
        archiver.ledger,
        on_round=on_round,
        consumer_group=group_id,
    )
    return CatchUp(read=read, again=again, archived=archived, signed=signed)
