"""The contract every :class:`~sagacity.ports.SagaIndex` meets; subclass it per adapter.

An index is written by an archiver, not through the port, so a subclass provides the index and
the archiver's three writes on the same fresh store: :meth:`SagaIndexContract.create_index`,
:meth:`~SagaIndexContract.archive`, :meth:`~SagaIndexContract.refuse` and
:meth:`~SagaIndexContract.cover`.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterator

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal
from sagacity.entries._events import GENESIS_HASH, JournalEntry
from sagacity.ports import SagaIndex

E = EventType
TOPIC = "sagacity.contract"


def _saga() -> str:
    return f"contract-{uuid.uuid4().hex}"


def _chain(saga: str, *events: EventType | tuple[EventType, str]) -> list[JournalEntry]:
    """A linked chain of ``events`` (an event with a result as ``(kind, result)``)."""
    journal = InMemoryJournal()
    entries = []
    for event in events:
        kind, result = event if isinstance(event, tuple) else (event, None)
        entries.append(
            journal.append(
                EntryDraft(saga_id=saga, event_type=kind, tool="wire", payload='"x"', result=result)
            )
        )
    return entries


class SagaIndexContract(abc.ABC):
    """Answer a saga's archived prefix and the partition's sagas with open requests."""

    @abc.abstractmethod
    def create_index(self) -> SagaIndex:
        """An index on a fresh, empty archive (the archiver's writes below go there)."""

    @abc.abstractmethod
    def archive(self, *, topic: str, partition: int, offset: int, entry: JournalEntry) -> None:
        """The archiver accepted ``entry``, read at ``offset`` (its head moves to it)."""

    @abc.abstractmethod
    def refuse(
        self,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        """The archiver refused the message at ``offset`` for ``reason`` (``bad_time``: for
        its time)."""

    @abc.abstractmethod
    def cover(self, *, topic: str, partition: int, next_offset: int) -> None:
        """The archiver has read (and compared keys of) every message below ``next_offset``."""

    @pytest.fixture
    def index(self) -> Iterator[SagaIndex]:
        """An index from :meth:`create_index`, closed after the test."""
        index = self.create_index()
        try:
            yield index
        finally:
            index.close()

    def test_it_implements_the_protocol(self, index: SagaIndex) -> None:
        assert isinstance(index, SagaIndex)

    def test_a_partition_not_read_covers_nothing(self, index: SagaIndex) -> None:
        saga = _saga()
        (entry,) = _chain(saga, E.SAGA_OPENED)
        self.archive(topic=TOPIC, partition=1, offset=0, entry=entry)
        assert index.lookup(TOPIC, 0, saga).covered_to is None
        assert index.sagas_with_pending_requests(TOPIC, 0).covered_to is None

    def test_an_unknown_saga_of_a_covered_partition_is_empty(self, index: SagaIndex) -> None:
        self.cover(topic=TOPIC, partition=0, next_offset=10)
        found = index.lookup(TOPIC, 0, _saga())
        assert found.covered_to == 10
        assert (list(found.events), list(found.refused), found.head) == ([], [], None)
        assert (found.base_seq, found.base_hash) == (0, GENESIS_HASH)

    def test_archived_events_come_back_in_seq_order_with_their_offsets(
        self, index: SagaIndex
    ) -> None:
        saga = _saga()
        entries = _chain(saga, E.SAGA_OPENED, E.INTENT, E.EXECUTED)
        for offset, entry in zip((4, 9, 12), entries, strict=True):
            self.archive(topic=TOPIC, partition=2, offset=offset, entry=entry)
        self.cover(topic=TOPIC, partition=2, next_offset=13)
        found = index.lookup(TOPIC, 2, saga)
        assert found.covered_to == 13
        assert [e.entry for e in found.events] == entries
        assert [(e.topic, e.partition, e.offset) for e in found.events] == [
            (TOPIC, 2, 4),
            (TOPIC, 2, 9),
            (TOPIC, 2, 12),
        ]
        assert found.head == (3, entries[-1].hash)

    def test_refused_messages_below_the_coverage_come_back_by_key(self, index: SagaIndex) -> None:
        saga = _saga()
        key = saga.encode()
        self.refuse(topic=TOPIC, partition=0, offset=3, key=key, value=b"\x00bad", reason="x")
        self.refuse(topic=TOPIC, partition=0, offset=1, key=key, value=None, reason="x")
        self.refuse(topic=TOPIC, partition=0, offset=8, key=key, value=b"late", reason="x")
        self.refuse(topic=TOPIC, partition=1, offset=2, key=key, value=b"other", reason="x")
        self.refuse(topic=TOPIC, partition=0, offset=4, key=b"else", value=b"y", reason="x")
        self.cover(topic=TOPIC, partition=0, next_offset=5)
        refused = index.lookup(TOPIC, 0, saga).refused
        assert [(r.offset, r.value) for r in refused] == [(1, None), (3, b"\x00bad")]

    def test_lookup_many_answers_as_lookup(self, index: SagaIndex) -> None:
        many = getattr(index, "lookup_many", None)
        if many is None:
            pytest.skip("this index offers no lookup_many")
        sagas = [_saga() for _ in range(3)]
        for n, saga in enumerate(sagas[:2]):
            (entry,) = _chain(saga, E.SAGA_OPENED)
            self.archive(topic=TOPIC, partition=0, offset=n, entry=entry)
        self.cover(topic=TOPIC, partition=0, next_offset=2)
        answers = many(TOPIC, 0, sagas)
        assert answers == {saga: index.lookup(TOPIC, 0, saga) for saga in sagas}

    def test_sagas_with_open_requests(self, index: SagaIndex) -> None:
        waiting, ended, compensating, plain, other = (_saga() for _ in range(5))
        chains = {
            waiting: _chain(
                waiting,
                E.AWAITING_APPROVAL,
                (E.SAGA_ENDED, "AWAITING_APPROVAL"),
            ),
            ended: _chain(ended, E.AWAITING_APPROVAL, (E.SAGA_ENDED, "COMPLETED")),
            compensating: _chain(compensating, E.AWAITING_APPROVAL, E.COMPENSATION_REQUESTED),
            plain: _chain(plain, E.SAGA_OPENED),
        }
        offset = 0
        for chain in chains.values():
            for entry in chain:
                self.archive(topic=TOPIC, partition=0, offset=offset, entry=entry)
                offset += 1
        (elsewhere,) = _chain(other, E.AWAITING_APPROVAL)
        self.archive(topic=TOPIC, partition=1, offset=0, entry=elsewhere)
        odd = _saga()
        self.refuse(
            topic=TOPIC,
            partition=0,
            offset=offset,
            key=odd.encode(),
            value=b"{}",
            reason="bad_time",
        )
        self.cover(topic=TOPIC, partition=0, next_offset=offset + 1)
        found = index.sagas_with_pending_requests(TOPIC, 0)
        assert found.covered_to == offset + 1
        assert list(found.sagas) == sorted([waiting, odd])
