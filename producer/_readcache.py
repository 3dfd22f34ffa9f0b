"""The reads a journal keeps, to continue a saga's read instead of reading it again.

A kept read may hold data fields opened through the key service; it is kept no longer than the
key service allows, and dropped at once when the saga is forgotten (its ``ERASED`` seen), so an
erasure reaches it within the documented bound (docs/operations/erasure.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from sagacity.producer._reader import SagaRead

READ_CACHE_SIZE = 256
"""Sagas whose latest read a journal keeps, to continue instead of re-reading."""


class ReadCache:
    """The latest read of recently read sagas, to continue instead of re-reading.

    A partition only grows at its end, so a read continued from an earlier one (whatever its
    age) gives what a read from the partition's start would: the cache can be stale, never
    wrong.  Bounded (least recently used out); entries are copies no caller holds.

    A read holding data opened through the key service is kept no longer than the key service
    allows (:meth:`~sagacity._keys.KeyService.opened_until`: the saga's key cache TTL), so an
    erasure reaches it within that bound: a read after it starts again from the partition and
    opens through the key service, which refuses an erased saga's key (the saga then reads as
    erased).  :meth:`forget` drops a saga at once (its ``ERASED`` seen).

    Args:
        size: sagas kept.
        keys: the key service the reads open sealed fields with (``None``: nothing is sealed,
            reads are kept until evicted).
    """

    def __init__(self, size: int = READ_CACHE_SIZE, *, keys: object | None = None) -> None:
        self._size = size
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
                del self._reads[saga_id]
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
            self._reads[read.saga_id] = (read.copy(), until)
            self._reads.move_to_end(read.saga_id)
            while len(self._reads) > self._size:
                self._reads.popitem(last=False)

    def forget(self, saga_id: str) -> None:
        """Drop the saga's read: the next one starts again from the partition."""
        with self._lock:
            self._reads.pop(saga_id, None)

    def _until(self, read: SagaRead) -> float:
        """How long ``read`` may be kept: for ever unless it holds opened data fields."""
        if self._opened_until is None or not _holds_openings(read):
            return float("inf")
        return self._opened_until(read.saga_id)


def _holds_openings(read: SagaRead) -> bool:
    """Whether a read holds the opening (salt and value) of any data field."""
    return any(e.salts for e in read.entries) or any(r.entry.salts for r in read.rejected)
