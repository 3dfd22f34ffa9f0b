"""Reading sagas back from the journal topic: verified chains, forks and skipped messages.

A reader accepts, per saga and in offset order, only the first event at each seq whose
``prev_hash`` extends the accepted tail and whose content hashes to its ``hash``.  Anything
else with the saga's key is reported, never accepted: a *fork* (a second event at a seq, or one
that does not extend the tail), a *duplicate* (the same event again) or a *skipped* message
(not decodable).  See docs/adr/0004-single-writer.md.

What a read gives is :mod:`._reads`'s; the partition scan is :mod:`._scan`'s and the read
index's prefix, re-checked, :mod:`._indexed`'s.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import Message

from sagacity.entries._events import JournalEntry
from sagacity.errors import (
    ConfigurationError,
    SagacityError,
    SerializationError,
    UnopenableError,
)
from sagacity.ports import (
    Ownership,
    PartitionRead,
    Rejected,
    SagaRead,
    Skipped,
    ownership,
)
from sagacity.producer._index import IndexedSaga, SagaIndex
from sagacity.producer._indexed import IndexedReads, scan_instead
from sagacity.producer._partition import misplaced, partition_for
from sagacity.producer._scan import PartitionScanner, Span, message_offset, writer_signature
from sagacity.schemas import decode_entry
from sagacity.schemas._sealed import FieldSealer
from sagacity.signing._writer_roles import HANDOFF_EVENTS
from sagacity.signing._writer_signature import WriterRegistry

__all__ = [
    "HANDOFF_EVENTS",
    "READ_CACHE_ENTRIES",
    "READ_CACHE_SIZE",
    "Ownership",
    "PartitionRead",
    "ReadCache",
    "Rejected",
    "SagaRead",
    "SagaReader",
    "Skipped",
    "ownership",
]

READ_CACHE_SIZE = 256
"""Sagas whose latest read a journal keeps, to continue instead of re-reading."""

READ_CACHE_ENTRIES = 100_000
"""The entries those reads may hold together: the cache's memory does not grow with sagas'
length (a longer read is not kept; the next read of that saga starts over)."""


class ReadCache:
    """The latest read of recently read sagas, to continue instead of re-reading.

    A partition only grows at its end, so a read continued from an earlier one (whatever its
    age) gives what a read from the partition's start would: the cache can be stale, never
    wrong.  Bounded in reads and in the entries they hold together (least recently used out);
    entries are copies no caller holds.

    A read holding data opened through the key service is kept no longer than the key service
    allows (:meth:`~sagacity.privacy._keys.KeyService.opened_until`: the saga's key cache TTL),
    so an erasure reaches it within that bound: a read after it starts again from the partition and
    opens through the key service, which refuses an erased saga's key (the saga then reads as
    erased).  :meth:`forget` drops a saga at once (its ``ERASED`` seen;
    docs/operations/erasure.md).

    Args:
        size: sagas kept.
        entries: entries kept, all reads together.
        keys: the key service the reads open sealed fields with (``None``: nothing is sealed,
            reads are kept until evicted).
    """

    def __init__(
        self,
        size: int = READ_CACHE_SIZE,
        entries: int = READ_CACHE_ENTRIES,
        *,
        keys: object | None = None,
    ) -> None:
        self._size = size
        self._max_entries = entries
        self._entries = 0
        opened_until = getattr(keys, "opened_until", None)
        self._opened_until: Callable[[str], float] | None = (
            opened_until if callable(opened_until) else None
        )
        self._reads: OrderedDict[str, tuple[SagaRead, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, saga_id: str) -> SagaRead | None:
        """The saga's latest read, unless it holds openings older than the key service allows."""
        with self._lock:
            found = self._reads.get(saga_id)
            if found is None:
                return None
            read, until = found
            if until <= time.monotonic():
                self._drop(saga_id)
                return None
            self._reads.move_to_end(saga_id)
            return read

    def put(self, read: SagaRead) -> None:
        """Keep ``read`` (a copy), unless a later read of the saga is kept already."""
        until = self._until(read)
        with self._lock:
            previous = self._reads.get(read.saga_id)
            if previous is not None and previous[0].next_offset > read.next_offset:
                return
            if previous is not None:
                self._drop(read.saga_id)
            if len(read.entries) > self._max_entries:
                return
            self._reads[read.saga_id] = (read.copy(), until)
            self._entries += len(read.entries)
            while len(self._reads) > self._size or self._entries > self._max_entries:
                _, (dropped, _until) = self._reads.popitem(last=False)
                self._entries -= len(dropped.entries)

    def forget(self, saga_id: str) -> None:
        """Drop the saga's read: the next one starts again from the partition."""
        with self._lock:
            self._drop(saga_id)

    def _drop(self, saga_id: str) -> None:
        found = self._reads.pop(saga_id, None)
        if found is not None:
            self._entries -= len(found[0].entries)

    def _until(self, read: SagaRead) -> float:
        """How long ``read`` may be kept: for ever unless it holds opened data fields."""
        if self._opened_until is None or not _holds_openings(read):
            return float("inf")
        return self._opened_until(read.saga_id)


def _holds_openings(read: SagaRead) -> bool:
    """Whether a read holds the opening (salt and value) of any data field."""
    return any(e.salts for e in read.entries) or any(r.entry.salts for r in read.rejected)


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
        self._indexed = None if index is None else IndexedReads(index, topic)
        self._partitions = partitions
        self._scanner = PartitionScanner(config, topic, timeout=timeout)

    @property
    def messages_read(self) -> int:
        """Messages this reader has consumed from Kafka so far (what its reads cost)."""
        return self._scanner.messages_read

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

    def placed(self, key: bytes | None, partition: int) -> bool:
        """Whether a message with ``key`` belongs on ``partition`` (:func:`misplaced`, the
        topic's partitioner over its partitions)."""
        return misplaced(key, partition, self._partitions) is None

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
        elif self._indexed is not None:
            out = self._indexed.start(saga_id, partition, until_offset)
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

    def _continue(self, out: SagaRead, until_offset: int | None) -> SagaRead:
        """Feed ``out`` the partition's messages from its ``next_offset`` on (in place)."""
        key = out.saga_id.encode("utf-8")
        partition = out.partition
        span = Span(start=out.next_offset)
        for message in self._scanner.scan(partition, span, until_offset):
            if message.key() != key:
                continue
            offset = message_offset(message)
            try:
                entry = self._decode(message.value() or b"")
            except SerializationError as exc:
                out.skipped.append(
                    Skipped(partition=partition, offset=offset, key=key, reason=exc.message)
                )
                continue
            out.feed(partition, offset, entry, writer_signature(message))
        out.next_offset = max(out.next_offset, span.end)
        return out

    def read_partition(self, partition: int) -> PartitionRead:
        """Every saga in ``partition`` (for scans such as replay and pending approvals).

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        out = PartitionRead(partition=partition)
        span = Span(start=0)
        for message in self._scanner.scan(partition, span, None):
            offset = message_offset(message)
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
            read.feed(partition, offset, entry, writer_signature(message))
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
        if self._indexed is not None:
            try:
                found = self._indexed.index.sagas_with_pending_requests(self._topic, partition)
            except SagacityError as exc:
                scan_instead(partition, exc)
            else:
                if found.covered_to is not None:
                    reads = self._requests_from_index(partition, found.covered_to, found.sagas)
                    if reads is not None:
                        return reads
        return list(self.read_partition(partition).sagas.values())

    def _requests_from_index(
        self, partition: int, covered_to: int, sagas: Sequence[str]
    ) -> list[SagaRead] | None:
        span = Span(start=covered_to)
        tail: dict[bytes, list[Message]] = {}
        for message in self._scanner.scan(partition, span, None):
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
                scan_instead(partition, exc)
                return None
        reads: list[SagaRead] = []
        for saga in mine:
            assert self._indexed is not None
            out = self._indexed.start(saga, partition, None, found.get(saga))
            if out.source != "index":
                return None
            key = saga.encode("utf-8")
            for message in tail.get(key, ()):
                offset = message_offset(message)
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

    def headers_at(self, saga_id: str, offset: int) -> object:
        """The headers of the message at ``offset`` of ``saga_id``'s partition (``None`` when
        it is gone, or carries another saga's key).

        Raises:
            JournalUnavailableError: the partition could not be read within the timeout.
        """
        key = saga_id.encode("utf-8")
        for message in self._scanner.scan(self.partition_of(saga_id), Span(start=offset), offset):
            if message_offset(message) == offset and message.key() == key:
                return message.headers()
        return None

    def close(self) -> None:
        """Release the consumer (and the index)."""
        self._scanner.close()
        if self._index is not None:
            self._index.close()
