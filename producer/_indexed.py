"""A saga's archived prefix as a read: the read index's answer, re-checked by the acceptance rule.

With a read index (the archive: docs/adr/0010-saga-read-index.md) a read takes the saga's
archived prefix from it, replays it through the acceptance rule in offset order (with the
messages the archive refused) and continues on the partition only from where the archiver
stopped.  Whenever the index cannot answer, or its answer does not check out, the read is an
empty one that scans the partition from its start (logged, and named in
:attr:`SagaRead.index_fallback`): either way the result is the full scan's.
"""

from __future__ import annotations

import logging
import time

from sagacity.entries._events import JournalEntry
from sagacity.errors import ArchiveSchemaError, SagacityError, SerializationError
from sagacity.ports import SagaRead, Skipped
from sagacity.producer._index import IndexedSaga, SagaIndex
from sagacity.schemas import decode_entry

log = logging.getLogger("sagacity.reader")


def scan_instead(partition: int, error: SagacityError) -> None:
    """Log that a scan of ``partition`` replaces the index (quietly when it holds no archive:
    the index says that once per process)."""
    level = logging.DEBUG if isinstance(error, ArchiveSchemaError) else logging.WARNING
    log.log(level, "partition %d: scanning it instead: %s", partition, error)


def check_indexed(found: IndexedSaga, topic: str, partition: int, covered: int) -> str | None:
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


def replay_indexed(out: SagaRead, found: IndexedSaga, covered: int) -> str | None:
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


class IndexedReads:
    """Reads that start from the read ``index`` on ``topic``, or fall back to a scan."""

    def __init__(self, index: SagaIndex, topic: str) -> None:
        self.index = index
        self._topic = topic
        self._warned_at = -60.0

    def start(
        self,
        saga_id: str,
        partition: int,
        until_offset: int | None,
        found: IndexedSaga | None = None,
    ) -> SagaRead:
        """The saga's read up to where the index covers it, or an empty read (scan) if the
        index cannot be used.  ``found``: the index's answer, when it was looked up already."""
        if found is None:
            try:
                found = self.index.lookup(self._topic, partition, saga_id)
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
        problem = check_indexed(found, self._topic, partition, covered)
        if problem is None:
            out = SagaRead(
                saga_id=saga_id,
                partition=partition,
                base_seq=found.base_seq,
                base_hash=found.base_hash,
                source="index",
            )
            problem = replay_indexed(out, found, covered)
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
