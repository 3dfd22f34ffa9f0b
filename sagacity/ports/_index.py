"""The read index's port: where a reader finds a saga's archived prefix
(docs/adr/0010-saga-read-index.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sagacity.entries._events import GENESIS_HASH, JournalEntry


@dataclass(frozen=True, kw_only=True)
class IndexedEvent:
    """An event the archiver accepted into a saga's chain.

    Attributes:
        topic / partition / offset: where the archiver read it.
        entry: the event as archived (the reader re-hashes it).
    """

    topic: str
    partition: int
    offset: int
    entry: JournalEntry


@dataclass(frozen=True, kw_only=True)
class RefusedMessage:
    """A message with the saga's key the archiver refused, bytes exactly as read.

    Attributes:
        offset: where it is in the partition.
        value: the message value (``None`` for a tombstone).
    """

    offset: int
    value: bytes | None


@dataclass(frozen=True, kw_only=True)
class IndexedSaga:
    """What an index knows of one saga.

    Attributes:
        covered_to: the archiver has read every message of the partition below this offset;
            ``None`` when it has not read the partition (the reader scans it).
        keys_checked_from: events below this offset were archived without comparing the
            message key with the saga the body names (``None``: none were compared); the
            reader does not take such events from the index.
        events: the accepted events, in seq order.
        refused: refused messages with the saga's key below ``covered_to``, in offset order.
        head: the archiver's head for the saga (``None`` if it has none).
        base_seq / base_hash: the link the archived chain starts after (a retention anchor).
    """

    covered_to: int | None
    keys_checked_from: int | None = None
    events: Sequence[IndexedEvent] = field(default_factory=tuple)
    refused: Sequence[RefusedMessage] = field(default_factory=tuple)
    head: tuple[int, str] | None = None
    base_seq: int = 0
    base_hash: str = GENESIS_HASH


@runtime_checkable
class SagaIndex(Protocol):
    """Finds a saga's archived prefix (an implementation: the Postgres archive,
    :class:`sagacity.postgres.PostgresSagaIndex`).

    An index may also offer ``lookup_many(topic, partition, saga_ids) -> dict[str,
    IndexedSaga]``, every saga's :meth:`lookup` in one snapshot; scans for pending approvals
    use it when present instead of one lookup per candidate saga.
    """

    def lookup(self, topic: str, partition: int, saga_id: str) -> IndexedSaga:
        """The saga's archived prefix, in one consistent snapshot.

        Raises:
            ArchiveSchemaError: the database holds no archive; the reader scans the partition
                without a warning (the index says so itself, once per process).
            SagacityError: the index cannot answer (unreachable, not an index); the reader
                then scans the partition.
        """
        ...

    def sagas_with_pending_requests(self, topic: str, partition: int) -> IndexedPartition:
        """Every saga of the partition whose archived chain may hold an open approval request."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, kw_only=True)
class IndexedPartition:
    """Sagas of one partition the archive knows, for scans (pending approvals).

    Attributes:
        covered_to: as :attr:`IndexedSaga.covered_to`.
        sagas: saga ids whose archived chain may hold an open approval request (its last
            ``AWAITING_APPROVAL`` is not followed by a decision).
    """

    covered_to: int | None
    sagas: Sequence[str] = field(default_factory=tuple)
