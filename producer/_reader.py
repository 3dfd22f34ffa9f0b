"""Reading sagas back from the journal topic: verified chains, forks and skipped messages.

A reader accepts, per saga and in offset order, only the first event at each seq whose
``prev_hash`` extends the accepted tail and whose content hashes to its ``hash``.  Anything
else with the saga's key is reported, never accepted: a *fork* (a second event at a seq, or one
that does not extend the tail), a *duplicate* (the same event again) or a *skipped* message
(not decodable).  See docs/adr/0004-single-writer.md.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sagacity._acceptance import ForkKind, Tail, attributed, judge, writers_after
from sagacity._events import GENESIS_HASH, EventType, JournalEntry
from sagacity._writer_roles import HANDOFF_EVENTS as HANDOFF_EVENTS
from sagacity._writer_roles import SagaWriters
from sagacity._writer_signature import HEADER as WRITER_SIGNATURE_HEADER
from sagacity._writer_signature import WriterRegistry
from sagacity.errors import (
    ArchiveSchemaError,
    ConfigurationError,
    JournalUnavailableError,
    SagacityError,
    SerializationError,
    UnopenableError,
)
from sagacity.producer._clients import kafka_reason, topic_unreadable, with_logger
from sagacity.producer._index import IndexedSaga, SagaIndex
from sagacity.producer._partition import partition_for
from sagacity.schemas import decode_entry
from sagacity.schemas._codec import FieldSealer

log = logging.getLogger("sagacity.reader")

READ_CACHE_SIZE = 256
"""Sagas whose latest read a journal keeps, to continue instead of re-reading."""


def _scan_instead(partition: int, error: SagacityError) -> None:
    """Log that a scan of ``partition`` replaces the index (quietly when it holds no archive:
    the index says that once per process)."""
    level = logging.DEBUG if isinstance(error, ArchiveSchemaError) else logging.WARNING
    log.log(level, "partition %d: scanning it instead: %s", partition, error)


@dataclass(frozen=True, kw_only=True)
class Rejected:
    """A decoded event the chain did not accept.

    Attributes:
        partition / offset: where it is on the topic.
        entry: the event.
        kind: why it was not accepted.
        detail: a sentence for people.
    """

    partition: int
    offset: int
    entry: JournalEntry
    kind: ForkKind
    detail: str


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A message that could not be decoded (never part of any chain).

    Attributes:
        partition / offset: where it is on the topic.
        key: its key (the saga id it claims), if any.
        reason: the decoder's reason.
    """

    partition: int
    offset: int
    key: bytes | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class Ownership:
    """Who may write a saga, derived from its chain alone.

    Attributes:
        live: a writer opened the saga and has not handed it off or ended it.
        writer: that writer's id (the ``SAGA_OPENED`` actor), when live.
        opened_seq: the seq of that ``SAGA_OPENED``.
    """

    live: bool
    writer: str | None = None
    opened_seq: int | None = None


def ownership(entries: tuple[JournalEntry, ...] | list[JournalEntry]) -> Ownership:
    """The saga's ownership after ``entries`` (its accepted chain)."""
    state = Ownership(live=False)
    for entry in entries:
        if entry.event_type is EventType.SAGA_OPENED:
            state = Ownership(live=True, writer=entry.actor, opened_seq=entry.seq)
        elif entry.event_type in HANDOFF_EVENTS:
            state = Ownership(live=False)
    return state


@dataclass(kw_only=True)
class SagaRead:
    """One saga as read from its partition.

    Attributes:
        saga_id: the saga.
        partition: its partition.
        entries: the accepted, verified chain in seq order.
        offsets: the topic offset of each accepted entry (same order).
        rejected: events with the saga's key that the chain did not accept.
        skipped: undecodable messages carrying the saga's key.
        next_offset: every message of the partition below this offset has been read (a read
            can be continued from here: :meth:`SagaReader.read` with ``resume=``).
        base_seq / base_hash: the link the chain starts after — ``(0, genesis)`` unless the
            archive's retention dropped the saga's oldest events (its retention anchor).
    """

    saga_id: str
    partition: int
    entries: list[JournalEntry] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    next_offset: int = 0
    base_seq: int = 0
    base_hash: str = GENESIS_HASH
    source: str = "scan"
    """``"index"`` when the prefix came from the read index, ``"scan"`` when the partition was
    read from its start (no index, or the index could not be used: see ``index_fallback``)."""
    index_fallback: str | None = None
    """Why the read index was not used for this read, when one is configured."""
    registry: WriterRegistry | None = None
    """With a writer registry, an event is accepted only from a registered writer whose
    signature verifies and who may write it there (docs/adr/0014 §4, §5)."""
    writers: SagaWriters = field(default_factory=SagaWriters)
    """Who may write the saga, folded from the accepted chain (with a registry)."""

    @property
    def tail(self) -> tuple[int, str]:
        """``(seq, hash)`` a taking-over writer extends (``(0, genesis)`` for a new saga)."""
        if not self.entries:
            return self.base_seq, self.base_hash
        return self.entries[-1].seq, self.entries[-1].hash

    def copy(self) -> SagaRead:
        """An independent copy (continuing it leaves this read unchanged)."""
        return SagaRead(
            saga_id=self.saga_id,
            partition=self.partition,
            entries=list(self.entries),
            offsets=list(self.offsets),
            rejected=list(self.rejected),
            skipped=list(self.skipped),
            next_offset=self.next_offset,
            base_seq=self.base_seq,
            base_hash=self.base_hash,
            source=self.source,
            index_fallback=self.index_fallback,
            registry=self.registry,
            writers=self.writers,
        )

    @property
    def ownership(self) -> Ownership:
        """Who may write the saga now."""
        return ownership(self.entries)

    @property
    def forks(self) -> list[Rejected]:
        """The rejected events that are forks (not duplicates)."""
        return [r for r in self.rejected if r.kind is not ForkKind.DUPLICATE]

    def accepted_offset(self, seq: int) -> int | None:
        """The offset of the accepted entry at ``seq``, if any."""
        index = seq - self.base_seq - 1
        if 0 <= index < len(self.offsets):
            return self.offsets[index]
        return None

    def feed(
        self, partition: int, offset: int, entry: JournalEntry, signature: bytes | None = None
    ) -> None:
        """Offer the next event with this saga's key (in offset order) to the chain (the
        acceptance rule, :func:`sagacity._acceptance.judge`, and with a writer registry
        :func:`sagacity._acceptance.attributed`; ``signature`` is the message's writer
        signature header)."""
        seq, prev = self.tail
        refusal = judge(
            Tail(seq=seq, hash=prev),
            self.saga_id,
            entry,
            accepted_hash=self._accepted_hash,
            taken_detail=self._taken_detail,
        )
        if refusal is None and self.registry is not None:
            refusal = attributed(self.registry, self.writers, entry, signature)
        if refusal is None:
            self.entries.append(entry)
            self.offsets.append(offset)
            if self.registry is not None:
                self.writers = writers_after(self.writers, entry)
            return
        self._reject(partition, offset, entry, refusal.kind, refusal.detail)

    def _accepted_hash(self, seq: int) -> str | None:
        index = seq - self.base_seq - 1
        return self.entries[index].hash if 0 <= index < len(self.entries) else None

    def _taken_detail(self, seq: int) -> str | None:
        index = seq - self.base_seq - 1
        if 0 <= index < len(self.entries):
            return f"seq {seq} is already taken by offset {self.offsets[index]}"
        if seq <= self.base_seq:
            return f"seq {seq} is before the retained chain (it starts after seq {self.base_seq})"
        return None

    def _reject(
        self, partition: int, offset: int, entry: JournalEntry, kind: ForkKind, detail: str
    ) -> None:
        self.rejected.append(
            Rejected(partition=partition, offset=offset, entry=entry, kind=kind, detail=detail)
        )


@dataclass(kw_only=True)
class PartitionRead:
    """Every saga of one partition, and what could not be decoded.

    Attributes:
        partition: the partition.
        sagas: each saga's read, by saga id.
        skipped: undecodable messages (any key).
        end_offset: the offset just past the last message read.
    """

    partition: int
    sagas: dict[str, SagaRead] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    end_offset: int = 0


@dataclass
class _Span:
    """Where one scan starts, and (once it has started) where it stops."""

    start: int
    end: int = 0


def _check_indexed(found: IndexedSaga, topic: str, partition: int, covered: int) -> str | None:
    """Why the index's events cannot stand for the scan of ``partition`` (``None``: they can)."""
    for event in found.events:
        if event.topic != topic or event.partition != partition:
            return (
                f"seq {event.entry.seq} was archived from {event.topic!r} partition "
                f"{event.partition}, which a scan of partition {partition} does not read"
            )
        if event.offset >= covered:
            continue
        if found.keys_checked_from is None or event.offset < found.keys_checked_from:
            return (
                f"seq {event.entry.seq} (offset {event.offset}) was archived without checking "
                "its message key"
            )
    return None


def _replay_indexed(out: SagaRead, found: IndexedSaga, covered: int) -> str | None:
    """Feed ``out`` the index's events and refused messages below ``covered`` in offset order,
    by the acceptance rule; return why the archived events do not re-verify, if they do not."""
    key = out.saga_id.encode("utf-8")
    items: list[tuple[int, JournalEntry | None, bytes | None]] = [
        (e.offset, e.entry, None) for e in found.events if e.offset < covered
    ]
    archived = len(items)
    items += [(r.offset, None, r.value) for r in found.refused if r.offset < covered]
    items.sort(key=lambda item: item[0])
    for offset, entry, value in items:
        if entry is not None:
            before = len(out.entries)
            out.feed(out.partition, offset, entry)
            if len(out.entries) == before:
                why = out.rejected[-1]
                return (
                    f"archived seq {entry.seq} at offset {offset}: {why.kind.value}: {why.detail}"
                )
            continue
        try:
            refused = decode_entry(value or b"")
        except SerializationError as exc:
            out.skipped.append(
                Skipped(partition=out.partition, offset=offset, key=key, reason=exc.message)
            )
            continue
        out.feed(out.partition, offset, refused)
    if archived == len(found.events) and found.head is not None:
        archived_tail = max(
            ((e.entry.seq, e.entry.hash) for e in found.events),
            default=(found.base_seq, found.base_hash),
        )
        if archived_tail != found.head:
            return (
                f"the archived head is seq {found.head[0]} but the archived events end at seq "
                f"{archived_tail[0]}"
            )
    return None


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


def _signature(message: Message) -> bytes | None:
    """The message's writer signature header, if any (docs/adr/0014 §3)."""
    for header in message.headers() or ():
        if header[0] == WRITER_SIGNATURE_HEADER:
            value = header[1]
            return value if isinstance(value, bytes) else None
    return None


def _offset(message: Message) -> int:
    offset = message.offset()
    return -1 if offset is None else offset


class ReadCache:
    """The latest read of recently read sagas, to continue instead of re-reading.

    A partition only grows at its end, so a read continued from an earlier one (whatever its
    age) gives what a read from the partition's start would: the cache can be stale, never
    wrong.  Bounded (least recently used out); entries are copies no caller holds.
    """

    def __init__(self, size: int = READ_CACHE_SIZE) -> None:
        self._size = size
        self._reads: OrderedDict[str, SagaRead] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, saga_id: str) -> SagaRead | None:
        with self._lock:
            read = self._reads.get(saga_id)
            if read is not None:
                self._reads.move_to_end(saga_id)
            return read

    def put(self, read: SagaRead) -> None:
        with self._lock:
            previous = self._reads.get(read.saga_id)
            if previous is not None and previous.next_offset > read.next_offset:
                return
            self._reads[read.saga_id] = read.copy()
            self._reads.move_to_end(read.saga_id)
            while len(self._reads) > self._size:
                self._reads.popitem(last=False)


class SagaReader:
    """Reads sagas from the journal topic, one partition at a time; thread-safe.

    A saga lives in the partition Kafka's default partitioner (murmur2 of the saga id) picks,
    so reading one saga reads one partition, never the whole topic.  Reads stop at the
    partition's end as of the start of the read: every event acknowledged before the read
    began is included.

    With an ``index`` (the archive: docs/adr/0010-saga-read-index.md) a read takes the saga's
    archived prefix from it, re-checks it with the acceptance rule and reads the partition only
    from where the archiver stopped; whenever the index cannot answer or its answer does not
    check out, the read scans the partition from its start instead (logged, and named in
    :attr:`SagaRead.index_fallback`).  Either way the result is the full scan's.

    Args:
        config: librdkafka settings (``bootstrap.servers`` and any TLS/SASL settings).
        topic: the journal topic.
        partitions: its partition count.
        timeout: the longest one partition read may take.
        index: where to find sagas' archived prefixes (closed with the reader).
        keys: the key service opening sealed data fields (docs/adr/0019-erasure.md); a
            sealed field that fails authentication is skipped as "authentication failed".
        writers: the writer registry: an event is accepted only from a registered writer
            whose signature header verifies and who may write it there (docs/adr/0014 §4, §5;
            refused ``unattributed`` / ``writer_not_owner``).  The archive keeps no headers,
            so with a registry reads scan the topic, not the index.
    """

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        topic: str,
        *,
        partitions: int,
        timeout: float = 30.0,
        index: SagaIndex | None = None,
        keys: FieldSealer | None = None,
        writers: WriterRegistry | None = None,
    ) -> None:
        self._writers = writers
        if writers is not None:
            index = None  # the archive keeps no writer signatures: the topic is read instead
        if keys is not None and index is not None:
            # The archive keeps a sealed event's commitments, not its sealed openings yet: an
            # indexed read would return entries without their data.
            raise ConfigurationError(
                "a reader with a key service reads the topic, not the archive's index: "
                "leave the index out (docs/adr/0019-erasure.md)"
            )
        self._keys = keys
        self._topic = topic
        self._index = index
        self._warned_at = -60.0
        self._partitions = partitions
        self._timeout = timeout
        self._bootstrap = str(config.get("bootstrap.servers", ""))
        self._lock = threading.Lock()
        self.messages_read = 0
        """Messages this reader has consumed from Kafka so far (what its reads cost)."""
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

    @property
    def index(self) -> SagaIndex | None:
        """The read index, if any."""
        return self._index

    @property
    def partitions(self) -> int:
        """The topic's partition count."""
        return self._partitions

    def partition_of(self, saga_id: str) -> int:
        """The partition holding ``saga_id``'s events."""
        return partition_for(saga_id.encode("utf-8"), self._partitions)

    def read(
        self,
        saga_id: str,
        *,
        until_offset: int | None = None,
        resume: SagaRead | None = None,
    ) -> SagaRead:
        """The saga's verified chain, forks and skipped messages.

        Args:
            saga_id: the saga.
            until_offset: stop after this offset (used to confirm one's own write); default
                the partition's end when the read starts.
            resume: an earlier read of this saga to continue: only the messages from its
                :attr:`SagaRead.next_offset` on are read, and the result is the one a read
                from the partition's start would give (the acceptance rule is a fold over the
                partition in offset order, and a partition only grows at its end).  ``resume``
                itself is left unchanged.

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
            ValueError: ``resume`` is a read of another saga.
        """
        partition = self.partition_of(saga_id)
        out = self._start(saga_id, partition, until_offset, resume)
        out.registry = self._writers
        return self._continue(out, until_offset)

    def _start(
        self, saga_id: str, partition: int, until_offset: int | None, resume: SagaRead | None
    ) -> SagaRead:
        if resume is not None:
            if resume.saga_id != saga_id or resume.partition != partition:
                raise ValueError(
                    f"cannot continue a read of saga {resume.saga_id!r} (partition "
                    f"{resume.partition}) as saga {saga_id!r} (partition {partition})"
                )
            out = resume.copy()
        elif self._index is not None:
            out = self._from_index(saga_id, partition, until_offset)
        else:
            out = SagaRead(saga_id=saga_id, partition=partition)
        return out

    def _decode(self, value: bytes) -> JournalEntry:
        """``value``'s entry, its sealed openings opened with the key service (if any).

        Raises:
            SerializationError: not an entry, or a sealed field cannot be opened (it fails
                authentication, or its saga's data key is missing or wrapped under a KEK this
                process does not hold; the reason leads the message): the message is skipped
                like any undecodable one, never failing the read of the partition.
        """
        try:
            return decode_entry(value, keys=self._keys)
        except UnopenableError as exc:
            raise SerializationError(f"{exc.reason}: {exc.message}") from exc

    def _from_index(
        self,
        saga_id: str,
        partition: int,
        until_offset: int | None,
        found: IndexedSaga | None = None,
    ) -> SagaRead:
        """The saga's read up to where the index covers it, or an empty read (scan) if the
        index cannot be used.  ``found``: the index's answer, when it was looked up already."""
        assert self._index is not None
        if found is None:
            try:
                found = self._index.lookup(self._topic, partition, saga_id)
            except SerializationError as exc:
                return self._fallback(
                    saga_id,
                    partition,
                    f"the read index holds a malformed event: {exc}",
                    error=True,
                )
            except ArchiveSchemaError as exc:
                # No archive there (yet): the index says so once per process, not every read.
                return self._fallback(
                    saga_id, partition, f"the read index did not answer: {exc}", quiet=True
                )
            except SagacityError as exc:
                return self._fallback(saga_id, partition, f"the read index did not answer: {exc}")
        if found.covered_to is None:
            return self._fallback(
                saga_id,
                partition,
                f"the archive has not read partition {partition} of {self._topic!r}",
                quiet=True,
            )
        covered = (
            found.covered_to if until_offset is None else min(found.covered_to, until_offset + 1)
        )
        problem = _check_indexed(found, self._topic, partition, covered)
        if problem is None:
            out = SagaRead(
                saga_id=saga_id,
                partition=partition,
                base_seq=found.base_seq,
                base_hash=found.base_hash,
                source="index",
            )
            problem = _replay_indexed(out, found, covered)
        if problem is not None:
            return self._fallback(
                saga_id, partition, f"the read index does not check out: {problem}", error=True
            )
        out.next_offset = covered
        return out

    def _fallback(
        self, saga_id: str, partition: int, why: str, *, quiet: bool = False, error: bool = False
    ) -> SagaRead:
        level = logging.ERROR if error else logging.DEBUG if quiet else logging.WARNING
        if level == logging.WARNING:
            # An index that does not answer would otherwise log every read: once a minute.
            now = time.monotonic()
            if now < self._warned_at + 60.0:
                level = logging.DEBUG
            else:
                self._warned_at = now
        log.log(level, "saga %r: scanning partition %d instead: %s", saga_id, partition, why)
        return SagaRead(saga_id=saga_id, partition=partition, index_fallback=why)

    def _continue(self, out: SagaRead, until_offset: int | None) -> SagaRead:
        """Feed ``out`` the partition's messages from its ``next_offset`` on (in place)."""
        key = out.saga_id.encode("utf-8")
        partition = out.partition
        span = _Span(start=out.next_offset)
        for message in self._scan(partition, span, until_offset):
            if message.key() != key:
                continue
            offset = _offset(message)
            try:
                entry = self._decode(message.value() or b"")
            except SerializationError as exc:
                out.skipped.append(
                    Skipped(partition=partition, offset=offset, key=key, reason=exc.message)
                )
                continue
            out.feed(partition, offset, entry, _signature(message))
        out.next_offset = max(out.next_offset, span.end)
        return out

    def read_partition(self, partition: int) -> PartitionRead:
        """Every saga in ``partition`` (for scans such as replay and pending approvals).

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        out = PartitionRead(partition=partition)
        span = _Span(start=0)
        for message in self._scan(partition, span, None):
            offset = _offset(message)
            out.end_offset = offset + 1
            key = message.key()
            try:
                entry = self._decode(message.value() or b"")
            except SerializationError as exc:
                out.skipped.append(
                    Skipped(partition=partition, offset=offset, key=key, reason=exc.message)
                )
                continue
            saga = key.decode("utf-8", "replace") if key is not None else entry.saga_id
            read = out.sagas.get(saga)
            if read is None:
                read = out.sagas[saga] = SagaRead(
                    saga_id=saga, partition=partition, registry=self._writers
                )
            read.feed(partition, offset, entry, _signature(message))
        out.end_offset = max(out.end_offset, span.end)
        for read in out.sagas.values():
            read.next_offset = out.end_offset
        return out

    def read_for_requests(self, partition: int) -> list[SagaRead]:
        """Reads of every saga of ``partition`` that may hold an open approval request.

        Without an index, every saga of the partition (one scan).  With one, the sagas the
        index names plus those with messages past the archiver's offset, each read from the
        index and one shared read of the partition's tail; if any of them cannot be taken from
        the index, the whole partition is scanned instead.

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        if self._index is not None:
            try:
                found = self._index.sagas_with_pending_requests(self._topic, partition)
            except SagacityError as exc:
                _scan_instead(partition, exc)
            else:
                if found.covered_to is not None:
                    reads = self._requests_from_index(partition, found.covered_to, found.sagas)
                    if reads is not None:
                        return reads
        return list(self.read_partition(partition).sagas.values())

    def _requests_from_index(
        self, partition: int, covered_to: int, sagas: Sequence[str]
    ) -> list[SagaRead] | None:
        span = _Span(start=covered_to)
        tail: dict[bytes, list[Message]] = {}
        for message in self._scan(partition, span, None):
            key = message.key()
            if key is not None:
                tail.setdefault(key, []).append(message)
        names = set(sagas) | {k.decode("utf-8", "replace") for k in tail}
        # A stray key (another partition's saga): a read of that saga never looks here.
        mine = sorted(saga for saga in names if self.partition_of(saga) == partition)
        found: dict[str, IndexedSaga] = {}
        many = getattr(self._index, "lookup_many", None)
        if many is not None and mine:
            try:
                found = many(self._topic, partition, mine)
            except SagacityError as exc:
                _scan_instead(partition, exc)
                return None
        reads: list[SagaRead] = []
        for saga in mine:
            out = self._from_index(saga, partition, None, found.get(saga))
            if out.source != "index":
                return None
            key = saga.encode("utf-8")
            for message in tail.get(key, ()):
                offset = _offset(message)
                if offset < out.next_offset:
                    continue
                try:
                    entry = self._decode(message.value() or b"")
                except SerializationError as exc:
                    out.skipped.append(
                        Skipped(partition=partition, offset=offset, key=key, reason=exc.message)
                    )
                    continue
                out.feed(partition, offset, entry)
            out.next_offset = max(out.next_offset, span.end)
            reads.append(out)
        return reads

    def _unavailable(
        self, detail: str, exc: BaseException | None = None
    ) -> JournalUnavailableError:
        error = topic_unreadable(self._topic, self._bootstrap, detail)
        error.__cause__ = exc
        return error

    def _watermarks(self, tp: TopicPartition, deadline: float) -> tuple[int, int]:
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
                    raise self._unavailable(kafka_reason(exc), exc) from exc
                time.sleep(0.1)

    def _scan(self, partition: int, span: _Span, until_offset: int | None) -> Iterator[Message]:
        """The partition's messages from ``span.start`` (or its low watermark, if later) to
        ``until_offset`` or its end; sets ``span.end`` to the offset the read stops at."""
        deadline = time.monotonic() + self._timeout
        with self._lock:
            tp = TopicPartition(self._topic, partition)
            low, high = self._watermarks(tp, deadline)
            start = max(low, span.start)
            end = high if until_offset is None else min(high, until_offset + 1)
            span.end = max(start, end)
            if end <= start:
                return
            self._consumer.assign([TopicPartition(self._topic, partition, start)])
            try:
                position = start
                while position < end:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._unavailable(
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
                            raise self._unavailable(kafka_reason(error), KafkaException(error))
                        offset = _offset(message)
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
            finally:
                self._consumer.unassign()

    def headers_at(self, saga_id: str, offset: int) -> object:
        """The headers of the message at ``offset`` of ``saga_id``'s partition (``None`` when
        it is gone, or carries another saga's key).

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        key = saga_id.encode("utf-8")
        for message in self._scan(self.partition_of(saga_id), _Span(start=offset), offset):
            if _offset(message) == offset and message.key() == key:
                return message.headers()
        return None

    def close(self) -> None:
        """Release the consumer (and the index)."""
        with self._lock:
            self._consumer.close()
        if self._index is not None:
            self._index.close()
