"""The contract every :class:`~sagacity.ports.ArchiveIngest` meets; subclass it per adapter.

A subclass provides :meth:`ArchiveIngestContract.create_ingest` (a store on the test's own
database, every one it makes sharing it, not yet prepared), the archiver's journal row
(:meth:`ArchiveIngestContract.journal_row`: which columns the service writes is the service's)
and a read of what the quarantine holds (no port reads it back).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from sagacity.errors import PersistenceError
from sagacity.ports import ArchiveIngest, HeadConflictError, IngestRetry

TOPIC = "journal.contract"
GROUP = "archiver"
AT_US = 1_780_000_000_000_000  # 2026-05-28: a month the store is asked to make
MONTH = 202605


@dataclass(frozen=True)
class Message:
    """A message read from the topic (:class:`~sagacity.ports.ReadMessage`)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = b"k"
    value: bytes | None = b"v"


@dataclass(frozen=True)
class Refusal:
    """A refused message (:class:`~sagacity.ports.QuarantinedMessage`)."""

    reason: str
    detail: str
    event: Message
    saga_id: str | None = None
    seq: int | None = None


class ArchiveIngestContract(abc.ABC):
    """One batch is one transaction; heads move by compare-and-set; refused messages are kept
    with their reasons; stored positions never move back."""

    @abc.abstractmethod
    def create_ingest(self) -> ArchiveIngest:
        """A store on the test's database (shared by every one the test makes), not prepared."""

    @abc.abstractmethod
    def journal_row(
        self, saga_id: str, seq: int, hash: str, *, recorded_at_us: int, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        """The columns the archiver writes and one event's values for them."""

    @abc.abstractmethod
    def quarantined(self, ingest: ArchiveIngest) -> list[Refusal]:
        """Every message the store's quarantine holds, in the order kept."""

    @pytest.fixture
    def ingest(self) -> Iterator[ArchiveIngest]:
        """A prepared store."""
        ingest = self.create_ingest()
        ingest.prepare()
        ingest.prepare()  # repeatable
        yield ingest
        ingest.close()

    def _write(self, ingest: ArchiveIngest, saga_id: str, seq: int, hash: str) -> None:
        columns, row = self.journal_row(saga_id, seq, hash, recorded_at_us=AT_US, offset=seq)
        with ingest.batch() as batch:
            assert batch.make_months({MONTH: AT_US}) == {}
            batch.write_rows(columns, [row])
            known = batch.read_heads([saga_id])
            batch.move_heads(known, {saga_id: (seq, hash)})

    def test_a_fresh_store_holds_nothing(self, ingest: ArchiveIngest) -> None:
        assert ingest.offsets(GROUP, TOPIC) == {}
        with ingest.batch() as batch:
            assert batch.read_heads(["s-1"]) == {}
            assert batch.archived_hash("s-1", 1) is None
        assert self.quarantined(ingest) == []

    def test_a_committed_batch_is_all_there_after_it(self, ingest: ArchiveIngest) -> None:
        refusal = Refusal("fork", "another hash at seq 2", Message(TOPIC, 0, 12), "s-1", 2)
        columns, row = self.journal_row("s-1", 1, "h1", recorded_at_us=AT_US, offset=11)
        with ingest.batch() as batch:
            assert batch.make_months({MONTH: AT_US}) == {}
            batch.write_rows(columns, [row])
            assert batch.archived_hash("s-1", 1) == "h1"  # read in the same transaction
            batch.move_heads({}, {"s-1": (1, "h1")})
            assert batch.quarantine([refusal]) == {"fork": 1}
            batch.store_offsets(GROUP, [Message(TOPIC, 0, 11), refusal.event])
        other = self.create_ingest()
        try:
            with other.batch() as batch:
                assert batch.read_heads(["s-1", "s-2"]) == {"s-1": (1, "h1")}
                assert batch.archived_hash("s-1", 1) == "h1"
                assert batch.archived_hash("s-1", 2) is None
            assert other.offsets(GROUP, TOPIC) == {0: (13, 11)}
            assert self.quarantined(other) == [refusal]
        finally:
            other.close()

    def test_a_batch_that_raises_keeps_nothing(self, ingest: ArchiveIngest) -> None:
        refusal = Refusal("undecodable", "not Avro", Message(TOPIC, 0, 12, None, b"\x00"))
        columns, row = self.journal_row("s-1", 1, "h1", recorded_at_us=AT_US, offset=11)

        def write_then_fail() -> None:
            with ingest.batch() as batch:
                batch.make_months({MONTH: AT_US})
                batch.write_rows(columns, [row])
                batch.move_heads({}, {"s-1": (1, "h1")})
                batch.quarantine([refusal])
                batch.store_offsets(GROUP, [Message(TOPIC, 0, 11), refusal.event])
                raise RuntimeError("the batch fails")

        with pytest.raises(RuntimeError, match="the batch fails"):
            write_then_fail()
        with ingest.batch() as batch:
            assert batch.read_heads(["s-1"]) == {}
            assert batch.archived_hash("s-1", 1) is None
        assert ingest.offsets(GROUP, TOPIC) == {}
        assert self.quarantined(ingest) == []

    def test_the_quarantine_keeps_each_refusal_with_its_reason(self, ingest: ArchiveIngest) -> None:
        refusals = [
            Refusal("fork", "seq 3 differs", Message(TOPIC, 1, 5), "s-1", 3),
            Refusal("undecodable", "not Avro", Message(TOPIC, 1, 6, None, b"\xff\x00")),
            Refusal("fork", "seq 4 differs", Message(TOPIC, 2, 7, b"s-2", None), "s-2", 4),
        ]
        with ingest.batch() as batch:
            assert batch.quarantine(refusals) == {"fork": 2, "undecodable": 1}
        with ingest.batch() as batch:
            assert batch.quarantine(refusals[:1]) == {"fork": 1}  # the same again is kept again
        assert self.quarantined(ingest) == [*refusals, refusals[0]]

    def test_heads_move_from_the_head_read(self, ingest: ArchiveIngest) -> None:
        with ingest.batch() as batch:
            batch.move_heads({}, {"s-1": (1, "h1"), "s-2": (4, "h4")})
        with ingest.batch() as batch:
            known = batch.read_heads(["s-1", "s-2"])
            assert known == {"s-1": (1, "h1"), "s-2": (4, "h4")}
            batch.move_heads(known, {"s-1": (3, "h3"), "s-2": (4, "h4")})
        with ingest.batch() as batch:
            assert batch.read_heads(["s-1", "s-2"]) == {"s-1": (3, "h3"), "s-2": (4, "h4")}

    def test_a_head_moved_by_another_archiver_refuses_the_batch(
        self, ingest: ArchiveIngest
    ) -> None:
        self._write(ingest, "s-1", 1, "h1")
        other = self.create_ingest()
        try:

            def move_after_theirs() -> None:
                with ingest.batch() as batch:
                    known = batch.read_heads(["s-1"])
                    batch.quarantine([Refusal("fork", "x", Message(TOPIC, 0, 9))])
                    self._write(other, "s-1", 2, "h2")  # the other archiver commits first
                    batch.move_heads(known, {"s-1": (2, "h2-mine")})

            with pytest.raises(HeadConflictError):
                move_after_theirs()
            with ingest.batch() as batch:
                assert batch.read_heads(["s-1"]) == {"s-1": (2, "h2")}
            assert self.quarantined(ingest) == []  # nothing of the refused batch
        finally:
            other.close()

    def test_a_head_made_by_another_archiver_refuses_the_batch(self, ingest: ArchiveIngest) -> None:
        other = self.create_ingest()
        try:

            def make_after_theirs() -> None:
                with ingest.batch() as batch:
                    assert batch.read_heads(["s-1"]) == {}
                    with other.batch() as theirs:
                        theirs.move_heads({}, {"s-1": (1, "theirs")})
                    batch.move_heads({}, {"s-1": (1, "mine")})

            with pytest.raises(HeadConflictError):
                make_after_theirs()
            with ingest.batch() as batch:
                assert batch.read_heads(["s-1"]) == {"s-1": (1, "theirs")}
        finally:
            other.close()

    def test_stored_offsets_never_move_back(self, ingest: ArchiveIngest) -> None:
        with ingest.batch() as batch:
            batch.store_offsets(GROUP, [Message(TOPIC, 0, o) for o in (10, 12, 11)])
        with ingest.batch() as batch:
            batch.store_offsets(GROUP, [Message(TOPIC, 0, 4), Message(TOPIC, 1, 7)])
        assert ingest.offsets(GROUP, TOPIC) == {0: (13, 10), 1: (8, 7)}
        with ingest.batch() as batch:
            batch.store_offsets(GROUP, [Message(TOPIC, 0, 20)])
        assert ingest.offsets(GROUP, TOPIC) == {0: (21, 10), 1: (8, 7)}
        assert ingest.offsets("another group", TOPIC) == {}
        assert ingest.offsets(GROUP, "another topic") == {}

    def test_archived_hashes_are_those_held(self, ingest: ArchiveIngest) -> None:
        for seq in range(1, 11):
            self._write(ingest, "s-1", seq, f"h{seq}")
        pairs = {("s-1", seq) for seq in range(1, 16)} | {("s-2", 1)}
        with ingest.batch() as batch:
            many = batch.archived_hashes(pairs)
            few = batch.archived_hashes({("s-1", 3), ("s-2", 1)})
        assert many == {("s-1", seq): f"h{seq}" for seq in range(1, 11)}
        assert few in ({}, {("s-1", 3): "h3"})

    def test_a_row_written_twice_is_a_conflict_a_retry_may_cure(
        self, ingest: ArchiveIngest
    ) -> None:
        self._write(ingest, "s-1", 1, "h1")
        columns, row = self.journal_row("s-1", 1, "h1", recorded_at_us=AT_US, offset=1)
        with pytest.raises(PersistenceError) as refused, ingest.batch() as batch:
            batch.write_rows(columns, [row])
        assert ingest.retry_of(refused.value) is IngestRetry.ROW_CONFLICT
        assert ingest.retry_of(RuntimeError("not the store's")) is None
        ingest.reset()
        with ingest.batch() as batch:  # the store is usable again
            assert batch.read_heads(["s-1"]) == {"s-1": (1, "h1")}

    def test_a_row_in_a_month_not_made_is_refused_as_a_dropped_month(
        self, ingest: ArchiveIngest
    ) -> None:
        columns, row = self.journal_row("s-1", 1, "h1", recorded_at_us=AT_US, offset=1)
        with pytest.raises(PersistenceError) as refused, ingest.batch() as batch:
            batch.write_rows(columns, [row])
        assert ingest.retry_of(refused.value) is IngestRetry.MONTH_DROPPED
        ingest.reset()
        with ingest.batch() as batch:
            assert batch.make_months({MONTH: AT_US}) == {}
            assert batch.make_months({MONTH: AT_US}) == {}  # made once
            batch.write_rows(columns, [row])
        with ingest.batch() as batch:
            assert batch.archived_hash("s-1", 1) == "h1"
