"""The read index in memory: :class:`~sagacity.ports.SagaIndex` for tests.

What an archiver does to a Postgres archive is done here by calling :meth:`archive`,
:meth:`refuse` and :meth:`cover`; lookups answer as the Postgres index does over the same
archive.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sagacity.entries._events import GENESIS_HASH, EventType, JournalEntry
from sagacity.gate._requests import AWAITING_RESULT
from sagacity.ports import IndexedEvent, IndexedPartition, IndexedSaga, RefusedMessage

BAD_TIME = "bad_time"
"""The refusal reason of an event refused for its time (a reader may still accept it)."""


@dataclass(frozen=True)
class _Refused:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


def _closes_requests(entry: JournalEntry) -> bool:
    """After ``entry`` no earlier approval request of the saga is open (sagacity.gate._requests)."""
    return entry.event_type is EventType.COMPENSATION_REQUESTED or (
        entry.event_type is EventType.SAGA_ENDED and entry.result != AWAITING_RESULT
    )


class InMemorySagaIndex:
    """An archive's per-saga index in process memory; safe under threads."""

    def __init__(self) -> None:
        self._events: dict[str, list[IndexedEvent]] = {}
        self._refused: list[_Refused] = []
        self._covered: dict[tuple[str, int], tuple[int, int | None]] = {}
        self._anchors: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    # -- what an archiver writes ----------------------------------------------------------
    def archive(self, *, topic: str, partition: int, offset: int, entry: JournalEntry) -> None:
        """Record that the archiver accepted ``entry``, read at ``offset``."""
        event = IndexedEvent(topic=topic, partition=partition, offset=offset, entry=entry)
        with self._lock:
            chain = self._events.setdefault(entry.saga_id, [])
            chain.append(event)
            chain.sort(key=lambda e: e.entry.seq)

    def refuse(
        self,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str = "bad_chain",
    ) -> None:
        """Record that the archiver refused the message at ``offset`` (``reason``:
        :data:`BAD_TIME` for an event refused for its time)."""
        with self._lock:
            self._refused.append(_Refused(topic, partition, offset, key, value, reason))

    def cover(
        self, *, topic: str, partition: int, next_offset: int, keys_checked_from: int | None = 0
    ) -> None:
        """Record that the archiver has read every message of the partition below
        ``next_offset``, comparing keys from ``keys_checked_from`` on."""
        with self._lock:
            self._covered[(topic, partition)] = (next_offset, keys_checked_from)

    def anchor(self, saga_id: str, *, seq: int, hash: str) -> None:
        """Record that retention removed the saga's chain up to ``seq`` (whose hash is
        ``hash``)."""
        with self._lock:
            self._anchors[saga_id] = max(self._anchors.get(saga_id, (0, "")), (seq, hash))

    # -- the port -------------------------------------------------------------------------
    def lookup(self, topic: str, partition: int, saga_id: str) -> IndexedSaga:
        """See :meth:`sagacity.ports.SagaIndex.lookup`."""
        return self.lookup_many(topic, partition, [saga_id])[saga_id]

    def lookup_many(
        self, topic: str, partition: int, saga_ids: Sequence[str]
    ) -> dict[str, IndexedSaga]:
        """:meth:`lookup` of every saga in ``saga_ids``, in one snapshot."""
        with self._lock:
            position = self._covered.get((topic, partition))
            out: dict[str, IndexedSaga] = {}
            for saga_id in saga_ids:
                if position is None:
                    out[saga_id] = IndexedSaga(covered_to=None)
                    continue
                covered_to, keys_checked_from = position
                events = tuple(self._events.get(saga_id, ()))
                key = saga_id.encode("utf-8")
                refused = sorted(
                    (r for r in self._refused if r.key == key and r.topic == topic),
                    key=lambda r: r.offset,
                )
                anchor = self._anchors.get(saga_id)
                out[saga_id] = IndexedSaga(
                    covered_to=covered_to,
                    keys_checked_from=keys_checked_from,
                    events=events,
                    refused=tuple(
                        RefusedMessage(offset=r.offset, value=r.value)
                        for r in refused
                        if r.partition == partition and r.offset < covered_to
                    ),
                    head=(events[-1].entry.seq, events[-1].entry.hash) if events else None,
                    base_seq=anchor[0] if anchor else 0,
                    base_hash=anchor[1] if anchor else GENESIS_HASH,
                )
            return out

    def sagas_with_pending_requests(self, topic: str, partition: int) -> IndexedPartition:
        """See :meth:`sagacity.ports.SagaIndex.sagas_with_pending_requests`."""
        with self._lock:
            position = self._covered.get((topic, partition))
            if position is None:
                return IndexedPartition(covered_to=None)
            sagas: set[str] = set()
            for saga_id, chain in self._events.items():
                for i, event in enumerate(chain):
                    if (
                        event.topic == topic
                        and event.partition == partition
                        and event.entry.event_type is EventType.AWAITING_APPROVAL
                        and not any(_closes_requests(e.entry) for e in chain[i + 1 :])
                    ):
                        sagas.add(saga_id)
            sagas |= {
                r.key.decode("utf-8", "replace")
                for r in self._refused
                if r.topic == topic
                and r.partition == partition
                and r.reason == BAD_TIME
                and r.key is not None
            }
        return IndexedPartition(covered_to=position[0], sagas=tuple(sorted(sagas)))

    def close(self) -> None:
        """Nothing to release."""
