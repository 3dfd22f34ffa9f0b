"""The journal on a topic, as a service reads it: what a read gives (a saga's read, a
partition's, and what was refused) and the port of a journal that reads its topic
(:class:`TopicJournal`, implemented by ``sagacity.producer.KafkaJournal``).

A read accepts, per saga and in offset order, only the first event at each seq whose
``prev_hash`` extends the accepted tail and whose content hashes to its ``hash`` (the acceptance
rule, :mod:`sagacity.chain._acceptance`); anything else with the saga's key is kept as
:class:`Rejected` (a fork or a duplicate) or :class:`Skipped` (not decodable), never accepted.
See docs/adr/0004-single-writer.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sagacity.chain._acceptance import ForkKind, Tail, attributed, judge, writers_after
from sagacity.entries._events import GENESIS_HASH, EventType, JournalEntry
from sagacity.journal import ConditionalJournal
from sagacity.signing._writer_roles import HANDOFF_EVENTS, SagaWriters
from sagacity.signing._writer_signature import WriterKey, WriterRegistry

if TYPE_CHECKING:
    from sagacity.privacy._keys import KeyService


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
        acceptance rule, :func:`sagacity.chain._acceptance.judge`, and with a writer registry
        :func:`sagacity.chain._acceptance.attributed`; ``signature`` is the message's writer
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


class PartitionMap(Protocol):
    """Which partition of the topic a saga lives in."""

    def partition_of(self, saga_id: str) -> int:
        """The saga's partition (the topic's partitioner over its saga id)."""
        ...

    def placed(self, key: bytes | None, partition: int) -> bool:
        """Whether a message with ``key`` belongs on ``partition`` (a message elsewhere was
        written around the partitioner)."""
        ...


class TopicJournal(ConditionalJournal, Protocol):
    """A journal on a partitioned topic, read saga by saga through the acceptance rule.

    Attributes:
        identity: the journal's name in signed decisions, settlements and claims.
        topic: the topic.
        max_event_bytes: the largest event the topic takes.
        seals: the sagas it opens are sealed (it has a key service).
        reader: where a saga lives on the topic.
    """

    @property
    def identity(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def max_event_bytes(self) -> int: ...
    @property
    def seals(self) -> bool: ...
    @property
    def reader(self) -> PartitionMap: ...

    def read(self, saga_id: str) -> SagaRead:
        """The saga's accepted chain and what was refused."""
        ...

    def forget(self, saga_id: str) -> None:
        """Drop what the journal keeps opened of the saga (its ``ERASED`` was seen)."""
        ...


class EntryDecoder(Protocol):
    """The entry one message value of the topic carries (the journal's wire format).

    ``keys`` open its sealed fields (``None``: they are left out, the entry verifying by its
    commitments).

    Raises:
        SerializationError: the value is not an entry.
        UnopenableError: a sealed field cannot be opened with ``keys``.
    """

    def __call__(self, data: bytes, *, keys: KeyService | None = None) -> JournalEntry: ...


class TopicJournals(Protocol):
    """Makes a new journal on the topic (the receiver closes it).

    ``writer_id`` / ``writer_key``: who it writes as and the key it signs with (``None``:
    the composition root's settings); ``writers``: the writer registry its reads check
    events against (``None``: the settings').
    """

    def __call__(
        self,
        *,
        writer_id: str | None = None,
        writer_key: WriterKey | None = None,
        writers: WriterRegistry | None = None,
    ) -> TopicJournal: ...
