"""The in-memory journal meets the journal contract."""

from __future__ import annotations

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, Journal
from sagacity.errors import JournalUnavailableError
from sagacity.testing.contracts import JournalContract


class TestInMemoryJournal(JournalContract):
    def create_journal(self) -> Journal:
        return InMemoryJournal()


def test_closed_journal_refuses_appends_and_keeps_entries() -> None:
    journal = InMemoryJournal()
    journal.append(EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED))
    journal.close()
    with pytest.raises(JournalUnavailableError, match="closed"):
        journal.append(EntryDraft(saga_id="s", event_type=EventType.SAGA_ENDED))
    assert len(journal.entries("s")) == 1


def test_entries_are_a_snapshot() -> None:
    journal = InMemoryJournal()
    journal.append(EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED))
    snapshot = journal.entries("s")
    journal.append(EntryDraft(saga_id="s", event_type=EventType.SAGA_ENDED))
    assert len(snapshot) == 1
    assert journal.saga_ids() == ("s",)


def test_append_after_is_a_compare_and_append() -> None:
    from sagacity import verify
    from sagacity.errors import TailMovedError
    from sagacity.journal import ConditionalJournal

    journal = InMemoryJournal()
    assert isinstance(journal, ConditionalJournal)
    first = journal.append_after(
        EntryDraft(saga_id="c", event_type=EventType.SAGA_OPENED), after_seq=0
    )
    assert first.seq == 1
    with pytest.raises(TailMovedError):
        journal.append_after(EntryDraft(saga_id="c", event_type=EventType.SAGA_ENDED), after_seq=0)
    assert len(journal.entries("c")) == 1
    journal.append_after(EntryDraft(saga_id="c", event_type=EventType.SAGA_ENDED), after_seq=1)
    assert verify(journal.entries("c")).ok
