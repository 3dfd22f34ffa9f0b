"""Replay: read the journal topic itself, verify its chains, and diff them against the archive.

The topic is read from its low watermark to the high watermark taken at start, with a private
consumer group that commits nothing.  Messages are selected by their Kafka key, as every reader
selects a saga's events (docs/adr/0004-single-writer.md), and each saga's chain is what a
reader accepts: in offset order, the first event at each seq that extends the accepted tail and
hashes to its recorded hash.  Every other event with the key is reported for what it is — a
fork (a writer conflict, or an event that does not extend the tail), a duplicate, an edited
event, a foreign one (its body names another saga) — and never compared with the archive, which
quarantines them (docs/adr/0006-archive-and-checkpoints.md).  Only the archive's rows of the
replayed topic are compared.  Each accepted chain is also read against the saga grammar
(:mod:`sagacity.chain._grammar`): a chain that links but tells an impossible story fails too.
Every saga's chain is held in memory: this is an auditor's tool
for a topic or a saga, not a service.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sagacity.chain._acceptance import ForkKind
from sagacity.chain._grammar import GrammarFinding, check
from sagacity.consumers.archive._ingest import Decoder
from sagacity.entries._events import JournalEntry
from sagacity.errors import SagacityError
from sagacity.ports import ArchivedHashes, Rejected, SagaRead, TopicPasses


@dataclass(kw_only=True)
class SagaReplay:
    """One saga (one Kafka key) as found on the topic, compared with the archive."""

    saga_id: str
    topic_events: int = 0
    """Events of the saga's accepted chain on the topic."""
    archive_events: int = 0
    topic_starts_at: int = 1
    rejected: list[Rejected] = field(default_factory=list)
    """Events with the saga's key that its chain did not accept (forks, duplicates, edited
    and foreign events), in offset order: reported, never compared with the archive."""
    missing: list[int] = field(default_factory=list)
    """Seqs of the accepted chain that the archive does not hold."""
    extra: list[int] = field(default_factory=list)
    """Seqs in the archive that the topic does not hold (and never expired from it)."""
    differing: list[int] = field(default_factory=list)
    """Seqs whose hash differs between the accepted chain and the archive."""
    grammar: list[GrammarFinding] = field(default_factory=list)
    """What the accepted chain says that cannot have happened (docs/adr/0005's state
    machine), first ones first."""

    def of_kind(self, kind: ForkKind) -> list[Rejected]:
        """The rejected events of one kind."""
        return [r for r in self.rejected if r.kind is kind]

    @property
    def ok(self) -> bool:
        """The archive holds exactly the chain a reader accepts from the topic (events the
        chain did not accept are reported, not failed: the archive quarantines them), and
        that chain tells a possible story."""
        return not self.missing and not self.extra and not self.differing and not self.grammar


@dataclass(kw_only=True)
class ReplayReport:
    """The outcome of a replay."""

    topic: str = ""
    messages: int = 0
    undecodable: list[tuple[int, int, str]] = field(default_factory=list)
    """(partition, offset, why) of messages that are not journal events."""
    unkeyed: list[tuple[int, int, str]] = field(default_factory=list)
    """(partition, offset, saga the body names) of events whose key is missing or not text:
    no reader selects them, so they are in no saga's chain."""
    trimmed: bool = False
    """The topic no longer starts at offset 0 (Kafka retention removed old events)."""
    sagas: dict[str, SagaReplay] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Everything decodes and every saga's archive matches its accepted chain."""
        return not self.undecodable and all(s.ok for s in self.sagas.values())


def read_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    passes: TopicPasses,
    decode: Decoder,
    saga_id: str | None = None,
    kafka_config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[ReplayReport, dict[str, list[JournalEntry]]]:
    """Read ``topic`` up to its current end; return the report and each saga's accepted chain.

    Args:
        passes: opens the pass over the topic (:class:`~sagacity.ports.TopicPasses`, from
            :func:`sagacity.compose.archive`).
        decode: a message value to its entry (the journal's wire format).
        saga_id: replay only the messages keyed with this saga id.
        timeout: the longest wait for the broker, and without a message.

    Raises:
        JournalUnavailableError: the topic cannot be read within ``timeout``.
        TopicNotFoundError: the topic does not exist.
        KafkaAccessDeniedError: the principal may not read the topic.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        # A readers' group (never commits): the ACL auditors hold is on this prefix.
        "group.id": f"sagacity-reader-replay-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        **(kafka_config or {}),
    }
    wanted = saga_id.encode("utf-8") if saga_id is not None else None
    report = ReplayReport(topic=topic)
    reads: dict[str, SagaRead] = {}
    with passes(topic, config=config, timeout_s=timeout) as scan:
        bounds = scan.bounds()
        trimmed = {b.partition for b in bounds if b.low > 0}
        report.trimmed = bool(trimmed)
        held = [b for b in bounds if b.high > b.low]
        starts: dict[int, int | None] = {b.partition: b.low for b in held}
        for messages in scan.read(starts, {b.partition: b.high for b in held}, idle_s=timeout):
            for m in messages:
                if wanted is not None and m.key != wanted:
                    continue
                report.messages += 1
                at = (m.partition, m.offset)
                trim = m.partition in trimmed
                _offer(report, reads, decode, at, m.key, m.value, trimmed=trim)
    for sid, read in reads.items():
        report.sagas[sid] = SagaReplay(
            saga_id=sid,
            topic_events=len(read.entries),
            topic_starts_at=read.base_seq + 1,
            rejected=list(read.rejected),
            grammar=check(read.entries, after_seq=read.base_seq),
        )
    return report, {sid: read.entries for sid, read in reads.items()}


def _offer(
    report: ReplayReport,
    reads: dict[str, SagaRead],
    decoder: Decoder,
    at: tuple[int, int],
    key: bytes | None,
    value: bytes | None,
    *,
    trimmed: bool,
) -> None:
    """Decode one message (at ``(partition, offset)``) and offer it to the chain of the saga
    its key names; ``trimmed``: retention removed the partition's oldest messages."""
    partition, offset = at
    try:
        if value is None:
            raise ValueError("message has no value")
        entry = decoder(value)
    except (SagacityError, ValueError) as exc:
        report.undecodable.append((partition, offset, str(exc)))
        return
    try:
        saga = key.decode("utf-8") if key is not None else None
    except UnicodeDecodeError:
        saga = None
    if not saga:
        report.unkeyed.append((partition, offset, entry.saga_id))
        return
    read = reads.get(saga)
    if read is None:
        read = reads[saga] = SagaRead(saga_id=saga, partition=partition)
    if (
        trimmed
        and not read.entries
        and read.base_seq == 0
        and entry.saga_id == saga
        and entry.seq > 1
    ):
        # Older events expired from the topic: the chain starts at the first one kept.
        read.base_seq, read.base_hash = entry.seq - 1, entry.prev_hash
    read.feed(partition, offset, entry)


def diff_with_archive(
    archive: ArchivedHashes,
    report: ReplayReport,
    chains: Mapping[str, list[JournalEntry]],
    *,
    saga_id: str | None = None,
) -> ReplayReport:
    """Fill each saga's missing / extra / differing seqs from the archive rows of the report's
    topic (``archive``: :class:`~sagacity.ports.ArchivedHashes`, the Postgres archive's
    ``PostgresArchiveReads``); return ``report``.

    Raises:
        ArchiveSchemaError / PersistenceError: the database is not an archive or failed.
    """
    if not report.topic:
        raise ValueError("the report names no topic (make it with read_topic)")
    archived: dict[str, dict[int, str]] = {}
    for sid, seq, h in archive.archived_hashes(topic=report.topic, saga_id=saga_id):
        archived.setdefault(sid, {})[seq] = h
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
