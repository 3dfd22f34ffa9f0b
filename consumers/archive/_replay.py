"""Replay: read the journal topic itself, verify its chains, and diff them against the archive.

The topic is read from its low watermark to the high watermark taken at start, with a private
consumer group that commits nothing.  Every saga's (seq, hash) pairs are held in memory: this
is an auditor's tool for a topic or a saga, not a service.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from sagacity._events import JournalEntry
from sagacity.chain import ChainVerdict, verify
from sagacity.consumers.archive._db import check_schema, mapped_errors
from sagacity.consumers.archive._ingest import Decoder, _avro_decoder
from sagacity.errors import JournalUnavailableError, SagacityError, TopicNotFoundError
from sagacity.producer._clients import with_logger


@dataclass(kw_only=True)
class SagaReplay:
    """One saga as found on the topic, compared with the archive."""

    saga_id: str
    topic_events: int = 0
    archive_events: int = 0
    verdict: ChainVerdict | None = None
    topic_starts_at: int = 1
    missing: list[int] = field(default_factory=list)
    """Seqs on the topic that the archive does not hold."""
    extra: list[int] = field(default_factory=list)
    """Seqs in the archive that the topic does not hold (and never expired from it)."""
    differing: list[int] = field(default_factory=list)
    """Seqs whose hash differs between topic and archive."""

    @property
    def ok(self) -> bool:
        """The topic's chain verifies and the archive matches it."""
        return (
            (self.verdict is None or self.verdict.ok)
            and not self.missing
            and not self.extra
            and not self.differing
        )


@dataclass(kw_only=True)
class ReplayReport:
    """The outcome of a replay."""

    messages: int = 0
    undecodable: list[tuple[int, int, str]] = field(default_factory=list)
    """(partition, offset, why) of messages that are not journal events."""
    trimmed: bool = False
    """The topic no longer starts at offset 0 (Kafka retention removed old events)."""
    sagas: dict[str, SagaReplay] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Everything verifies and matches."""
        return not self.undecodable and all(s.ok for s in self.sagas.values())


def read_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    saga_id: str | None = None,
    decode: Decoder | None = None,
    kafka_config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[ReplayReport, dict[str, list[JournalEntry]]]:
    """Read ``topic`` up to its current end; return the report and entries per saga.

    Raises:
        JournalUnavailableError: the topic cannot be read within ``timeout``.
    """
    decoder = decode if decode is not None else _avro_decoder()
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"sagacity-replay-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        **(kafka_config or {}),
    }
    consumer = Consumer(with_logger(config))
    report = ReplayReport()
    chains: dict[str, list[JournalEntry]] = {}
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            raise JournalUnavailableError(f"cannot read topic {topic!r}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist or has no partitions", topic=topic
            )
        ends: dict[int, int] = {}
        assignment = []
        for p in sorted(info.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            report.trimmed = report.trimmed or low > 0
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        idle = 0.0
        while ends and idle < timeout:
            messages = consumer.consume(num_messages=1000, timeout=1.0)
            if not messages:
                idle += 1.0
                continue
            idle = 0.0
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise JournalUnavailableError(f"reading {topic!r} failed: {err}")
                    continue
                partition, offset = m.partition() or 0, m.offset() or 0
                if partition in ends and offset + 1 >= ends[partition]:
                    del ends[partition]
                report.messages += 1
                value = m.value()
                try:
                    if value is None:
                        raise ValueError("message has no value")
                    entry = decoder(value)
                except (SagacityError, ValueError) as exc:
                    report.undecodable.append((partition, offset, str(exc)))
                    continue
                if saga_id is not None and entry.saga_id != saga_id:
                    continue
                chains.setdefault(entry.saga_id, []).append(entry)
        if ends:
            raise JournalUnavailableError(f"topic {topic!r} not read to its end in {timeout} s")
    finally:
        consumer.close()
    for sid, entries in chains.items():
        first = entries[0]
        replay = SagaReplay(saga_id=sid, topic_events=len(entries))
        if report.trimmed and first.seq > 1:
            # Older events expired from the topic; check the rest from the first one kept.
            replay.topic_starts_at = first.seq
            replay.verdict = verify(
                entries, saga_id=sid, after_seq=first.seq - 1, after_hash=first.prev_hash
            )
        else:
            replay.verdict = verify(entries, saga_id=sid)
        report.sagas[sid] = replay
    return report, chains


def diff_with_archive(
    conn: psycopg.Connection,
    report: ReplayReport,
    chains: Mapping[str, list[JournalEntry]],
    *,
    saga_id: str | None = None,
) -> ReplayReport:
    """Fill each saga's missing / extra / differing seqs from the archive; return ``report``.

    Raises:
        ArchiveSchemaError / PersistenceError: the database is not an archive or failed.
    """
    check_schema(conn)
    where = "WHERE saga_id = %s" if saga_id is not None else ""
    with mapped_errors("read the archive for replay"), conn.transaction():
        archived: dict[str, dict[int, str]] = {}
        rows = conn.execute(
            f"SELECT saga_id, seq, hash FROM side_effect_journal {where}",  # noqa: S608 - constant
            (saga_id,) if saga_id is not None else (),
        )
        for sid, seq, h in rows:
            archived.setdefault(sid, {})[int(seq)] = h
    for sid in sorted(set(archived) | set(chains)):
        replay = report.sagas.setdefault(sid, SagaReplay(saga_id=sid))
        on_topic = {e.seq: e.hash for e in chains.get(sid, [])}
        in_archive = archived.get(sid, {})
        replay.archive_events = len(in_archive)
        replay.missing = sorted(s for s in on_topic if s not in in_archive)
        replay.differing = sorted(
            s for s in on_topic if s in in_archive and in_archive[s] != on_topic[s]
        )
        floor = replay.topic_starts_at if sid in chains else None
        if floor is None:
            # Nothing on the topic: expected only if the topic was trimmed.
            replay.extra = [] if report.trimmed else sorted(in_archive)
        else:
            replay.extra = sorted(s for s in in_archive if s not in on_topic and s >= floor)
    return report
