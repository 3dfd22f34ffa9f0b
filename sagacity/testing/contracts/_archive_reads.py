"""The contract the archive's read ports meet (:class:`~sagacity.ports.ArchivedHashes`,
:class:`~sagacity.ports.ArchivedHeads`, :class:`~sagacity.ports.SagaRows`,
:class:`~sagacity.ports.ArchivedEvents` and the store's
:class:`~sagacity.ports.HeadFindings`); subclass it per adapter.

A subclass provides the archive's store (:meth:`ArchiveReadsContract.create_ingest`, as for
:class:`~sagacity.testing.contracts.ArchiveIngestContract`), the archiver's row of an entry
(:meth:`ArchiveReadsContract.entry_row`: which columns the service writes is the service's)
and the reads on the same database (:meth:`ArchiveReadsContract.create_reads`).  The suite
archives sagas' chains through the store's batches and reads them back through the ports only.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pytest

from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import ArchiveSchemaError, SerializationError
from sagacity.ports import (
    ArchivedEvents,
    ArchivedHashes,
    ArchivedHead,
    ArchivedHeads,
    ArchiveIngest,
    SagaRows,
    WriterEvent,
)
from sagacity.testing.contracts._archive_ingest import AT_US, MONTH, TOPIC
from sagacity.testing.contracts._chains import _Chain

E = EventType
OTHER_TOPIC = "journal.other"
SECOND_US = 1_000_000


class ArchiveReads(ArchivedHashes, ArchivedHeads, SagaRows, ArchivedEvents, Protocol):
    """The read ports the suite asks of one store."""


class ArchiveReadsContract(abc.ABC):
    """What was archived reads back as archived: every hash of a topic, the quiet heads, a
    saga's rows and entries, the events its writers are folded from, the unsigned heads."""

    @abc.abstractmethod
    def create_ingest(self) -> ArchiveIngest:
        """The archive's store on the test's database (shared by the test's), not prepared."""

    @abc.abstractmethod
    def entry_row(
        self, entry: JournalEntry, *, topic: str, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        """The columns the archiver writes and ``entry``'s values for them, read from
        ``topic`` at ``offset``."""

    @abc.abstractmethod
    def create_reads(self) -> ArchiveReads:
        """The archive's reads on the test's database."""

    @pytest.fixture
    def ingest(self) -> Iterator[ArchiveIngest]:
        """A prepared store."""
        ingest = self.create_ingest()
        ingest.prepare()
        yield ingest
        ingest.close()

    def archive(
        self,
        ingest: ArchiveIngest,
        entries: Sequence[JournalEntry],
        *,
        topic: str = TOPIC,
        head: bool = True,
    ) -> None:
        """Archive ``entries`` (one saga's, in order) in one batch, moving its head to the
        last (unless not ``head``)."""
        rows = [self.entry_row(e, topic=topic, offset=e.seq) for e in entries]
        last = entries[-1]
        with ingest.batch() as batch:
            assert batch.make_months({MONTH: AT_US}) == {}
            batch.write_rows(rows[0][0], [values for _, values in rows])
            if head:
                known = batch.read_heads([last.saga_id])
                batch.move_heads(known, {last.saga_id: (last.seq, last.hash)})

    def chain(self, saga_id: str, *kinds: EventType, start_us: int = AT_US) -> _Chain:
        """A saga's chain of ``kinds``, a second apart from ``start_us``."""
        chain = _Chain(saga_id, start_us=start_us)
        for kind in kinds:
            chain.add(kind, actor="agent-1", after_us=SECOND_US)
        return chain

    # ArchivedHashes

    def test_archived_hashes_are_every_event_of_the_topic(self, ingest: ArchiveIngest) -> None:
        one = self.chain("s-1", E.SAGA_OPENED, E.INTENT, E.EXECUTED)
        two = self.chain("s-2", E.SAGA_OPENED, E.INTENT)
        elsewhere = self.chain("s-3", E.SAGA_OPENED)
        assert sorted(self.create_reads().archived_hashes(topic=TOPIC)) == []
        self.archive(ingest, one.entries)
        self.archive(ingest, two.entries)
        self.archive(ingest, elsewhere.entries, topic=OTHER_TOPIC)
        reads = self.create_reads()

        def triples(*chains: _Chain) -> list[tuple[str, int, str]]:
            return sorted((e.saga_id, e.seq, e.hash) for c in chains for e in c.entries)

        assert sorted(reads.archived_hashes(topic=TOPIC)) == triples(one, two)
        assert sorted(reads.archived_hashes(topic=OTHER_TOPIC)) == triples(elsewhere)
        assert sorted(reads.archived_hashes(topic=TOPIC, saga_id="s-2")) == triples(two)
        assert sorted(reads.archived_hashes(topic=TOPIC, saga_id="s-3")) == []
        assert sorted(reads.archived_hashes(topic=TOPIC, saga_id="s-9")) == []

    # ArchivedHeads

    def test_quiet_heads_are_the_old_heads_not_excluded_oldest_first(
        self, ingest: ArchiveIngest
    ) -> None:
        later = self.chain("s-later", E.SAGA_OPENED, E.INTENT, start_us=AT_US + 10 * SECOND_US)
        older = self.chain("s-older", E.SAGA_OPENED, E.INTENT, E.EXECUTED)
        ended = self.chain("s-ended", E.SAGA_OPENED, E.COMPENSATED)
        # Opened long ago, but its head is recent: not quiet.
        busy = self.chain("s-busy", E.SAGA_OPENED)
        busy.add(E.INTENT, after_us=100 * SECOND_US)
        elsewhere = self.chain("s-elsewhere", E.SAGA_OPENED)
        for chain in (later, older, ended, busy):
            self.archive(ingest, chain.entries)
        self.archive(ingest, elsewhere.entries, topic=OTHER_TOPIC)

        def head(chain: _Chain) -> ArchivedHead:
            last = chain.entries[-1]
            return ArchivedHead(
                saga_id=last.saga_id,
                seq=last.seq,
                event_type=last.event_type.value,
                recorded_at_us=last.recorded_at_us,
            )

        reads = self.create_reads()
        before_us = AT_US + 50 * SECOND_US
        excluding = {E.COMPENSATED.value}
        quiet = reads.quiet_heads(
            topic=TOPIC, recorded_before_us=before_us, excluding=excluding, limit=10
        )
        assert quiet == [head(older), head(later)]
        assert reads.quiet_heads(
            topic=TOPIC, recorded_before_us=before_us, excluding=excluding, limit=1
        ) == [head(older)]
        assert reads.quiet_heads(
            topic=TOPIC, recorded_before_us=before_us, excluding=(), limit=10
        ) == [head(ended), head(older), head(later)]
        # Recorded exactly at the bound is not before it.
        assert reads.quiet_heads(
            topic=TOPIC,
            recorded_before_us=later.entries[-1].recorded_at_us,
            excluding=excluding,
            limit=10,
        ) == [head(older)]

    # SagaRows

    def test_a_sagas_rows_are_its_entries_in_the_order_archived(
        self, ingest: ArchiveIngest
    ) -> None:
        chain = self.chain("s-1", E.SAGA_OPENED)
        chain.add(E.INTENT, actor="agent-1", writer="agent-1")
        chain.add(E.EXECUTED, actor="agent-1", result='{"ok":true}')
        chain.request()
        chain.add(E.APPROVED, actor="alice", ref=4)
        other = self.chain("s-2", E.SAGA_OPENED, E.INTENT)
        self.archive(ingest, chain.entries[:2])
        self.archive(ingest, other.entries)
        self.archive(ingest, chain.entries[2:])
        reads = self.create_reads()
        rows = reads.saga_rows("s-1", forms=True)
        assert [reads.entry_of(row, forms=True) for row in rows] == chain.entries
        plain = [reads.entry_of(row, forms=False) for row in reads.saga_rows("s-1", forms=False)]
        assert [(e.seq, e.event_type, e.hash, e.prev_hash, e.attributes) for e in plain] == [
            (e.seq, e.event_type, e.hash, e.prev_hash, e.attributes) for e in chain.entries
        ]
        assert reads.saga_rows("s-9", forms=True) == []

    def test_a_row_that_is_no_entry_is_refused(self, ingest: ArchiveIngest) -> None:
        self.archive(ingest, self.chain("s-1", E.SAGA_OPENED).entries)
        reads = self.create_reads()
        (row,) = reads.saga_rows("s-1", forms=True)
        with pytest.raises(SerializationError):
            reads.entry_of((None,) * len(row), forms=True)

    # ArchivedEvents

    def test_writer_events_are_the_asked_types_of_the_asked_sagas(
        self, ingest: ArchiveIngest
    ) -> None:
        one = self.chain("s-1", E.SAGA_OPENED)
        one.add(E.INTENT, actor="agent-1", writer="agent-1")
        one.add(E.EXECUTED, actor="agent-1")
        one.add(E.INTENT, actor="agent-2", writer="agent-2", handoff="agent-1")
        two = self.chain("s-2", E.SAGA_OPENED)
        two.add(E.INTENT, actor="agent-3")
        three = self.chain("s-3", E.SAGA_OPENED, E.INTENT)
        for chain in (two, one, three):
            self.archive(ingest, chain.entries)
        reads = self.create_reads()
        events = reads.writer_events(["s-2", "s-1", "s-9"], {E.INTENT.value})
        assert events == [
            WriterEvent(
                saga_id="s-1",
                event_type="INTENT",
                actor="agent-1",
                attributes={"writer": "agent-1"},
            ),
            WriterEvent(
                saga_id="s-1",
                event_type="INTENT",
                actor="agent-2",
                attributes={"writer": "agent-2", "handoff": "agent-1"},
            ),
            WriterEvent(saga_id="s-2", event_type="INTENT", actor="agent-3"),
        ]
        assert reads.writer_events(["s-1"], ()) == []
        assert reads.writer_events((), {E.INTENT.value}) == []

    def test_archived_entries_are_those_up_to_each_sagas_bound(self, ingest: ArchiveIngest) -> None:
        one = self.chain("s-1", E.SAGA_OPENED, E.INTENT, E.EXECUTED, E.INTENT)
        two = self.chain("s-2", E.SAGA_OPENED, E.INTENT)
        three = self.chain("s-3", E.SAGA_OPENED, E.INTENT)
        for chain in (three, two, one):
            self.archive(ingest, chain.entries)
        reads = self.create_reads()
        assert reads.archived_entries({"s-2": 5, "s-1": 2}) == one.entries[:2] + two.entries
        assert reads.archived_entries({"s-1": 0, "s-9": 3}) == []
        assert reads.archived_entries({}) == []

    def test_archived_entries_at_one_seq_are_in_archive_order(self, ingest: ArchiveIngest) -> None:
        chain = self.chain("s-1", E.SAGA_OPENED, E.INTENT, E.EXECUTED)
        # Another entry at seq 2 (another time), as a database operator could write it.
        fork = self.chain("s-1", E.SAGA_OPENED, E.EXECUTED, start_us=AT_US + 30 * SECOND_US)
        self.archive(ingest, chain.entries)
        self.archive(ingest, fork.entries[1:], head=False)
        reads = self.create_reads()
        assert reads.archived_entries({"s-1": 3}) == [
            chain.entries[0],
            chain.entries[1],
            fork.entries[1],
            chain.entries[2],
        ]

    def test_a_store_that_is_no_archive_is_refused(self) -> None:
        reads = self.create_reads()
        with pytest.raises(ArchiveSchemaError):
            reads.quiet_heads(topic=TOPIC, recorded_before_us=AT_US, excluding=(), limit=1)
        with pytest.raises(ArchiveSchemaError):
            list(reads.archived_hashes(topic=TOPIC))

    # HeadFindings (the findings it writes no port reads back)

    def test_the_unsigned_heads_are_every_archived_head(self, ingest: ArchiveIngest) -> None:
        with ingest.head_findings().finding("read the heads") as unit:
            assert unit.unsigned_heads() == []
        one = self.chain("s-1", E.SAGA_OPENED, E.INTENT)
        two = self.chain("s-2", E.SAGA_OPENED)
        self.archive(ingest, one.entries[:1])
        self.archive(ingest, two.entries)
        self.archive(ingest, one.entries[1:])
        with ingest.head_findings().finding("read the heads") as unit:
            heads = sorted(unit.unsigned_heads())
        assert heads == [(e.saga_id, e.seq, e.hash) for e in (one.entries[-1], two.entries[-1])]
