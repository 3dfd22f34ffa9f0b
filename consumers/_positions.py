"""Where a service's consumer positions are kept: committed to Kafka once the work before them
is done, or in the service's own table, written in the transaction of its effects.

Either way a position moves only after the effect is durable, so a restart, a rebalance or a
crash re-reads what was not done and loses nothing.  Both are
:class:`~sagacity.ports.PositionStore` s, read by the transport's consumer runtime.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sagacity.errors import PersistenceUnavailableError

log = logging.getLogger("sagacity.consumer")


@dataclass
class Ledger:
    """Which offsets of one partition are done, when work finishes out of order.

    Only the contiguous prefix of finished offsets may be committed: ``commit_at`` is the
    offset after it (``None`` until the first is done); ``committed`` is what was last sent.
    """

    pending: OrderedDict[int, bool] = field(default_factory=OrderedDict)
    commit_at: int | None = None
    committed: int | None = None

    def add(self, offset: int) -> None:
        """``offset`` was read; it is not done yet."""
        self.pending[offset] = False

    def done(self, offset: int) -> None:
        """The work for ``offset`` is durable."""
        if offset in self.pending:
            self.pending[offset] = True
        while self.pending:
            first, finished = next(iter(self.pending.items()))
            if not finished:
                break
            self.pending.popitem(last=False)
            self.commit_at = first + 1


class KafkaCommits:
    """Positions committed to Kafka once the service says the work before them is done.

    Args:
        ready: the next offset to commit per partition (only those in the given set, or all
            for ``None``) that changed since the last call; the service marks them committed.
        done: the partition's position as far as the work is done (for lag), if known.
    """

    in_kafka = True
    from_beginning = False

    def __init__(
        self,
        ready: Callable[[Collection[int] | None], Mapping[int, int]],
        *,
        done: Callable[[int], int | None] | None = None,
    ) -> None:
        self.ready = ready
        self.done = done

    def starting(self, topic: str, stop: threading.Event) -> Mapping[int, int]:
        """Nothing: a partition starts at the group's committed position."""
        del topic, stop
        return {}


class StoredOffsets(Protocol):
    """What a service provides to keep its positions in its own table."""

    def __call__(self, topic: str) -> Mapping[int, int]:
        """The next offset to read per partition of ``topic``, as stored with the effects.

        Raises:
            PersistenceError: the table cannot be read.
        """
        ...


class TablePositions:
    """Positions stored by the service in a table, in the transaction that writes its effect.

    Args:
        read: the stored positions.
        from_beginning: a partition the table does not name starts at its first offset
            (``True``) or at the group's committed position (``False``).
        wait_on: errors on reading that mean "not yet" (the database is away): the
            assignment waits a second and reads again; others propagate.
    """

    in_kafka = False
    done: Callable[[int], int | None] | None = None

    def __init__(
        self,
        read: StoredOffsets,
        *,
        from_beginning: bool,
        wait_on: tuple[type[Exception], ...] = (PersistenceUnavailableError,),
    ) -> None:
        self._read = read
        self._from_beginning = from_beginning
        self._wait_on = wait_on

    def ready(self, only: Collection[int] | None) -> Mapping[int, int]:
        """Nothing: the table is the truth; Kafka hears of batches as they are handled."""
        del only
        return {}

    def starting(self, topic: str, stop: threading.Event) -> Mapping[int, int]:
        """The stored positions (waiting while the database is away), ``{}`` if stopped."""
        while True:
            try:
                return dict(self._read(topic))
            except self._wait_on as exc:
                log.warning("cannot read stored offsets yet: %s", exc)
                if stop.wait(1.0):
                    return {}

    @property
    def from_beginning(self) -> bool:
        """A partition the table does not name starts at its first offset (``False``: at the
        group's committed position)."""
        return self._from_beginning
