"""The compensation service's journals on the topic: one to learn the topic's layout, one per
worker, made by the :class:`~sagacity.ports.TopicJournals` the service is handed.

Each worker thread has a journal of its own (its own reader, so the sagas' reads run in
parallel); an ``ERASED`` makes every one of them forget what it opened of the saga.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from sagacity.entries._events import JournalEntry
from sagacity.errors import ConfigurationError
from sagacity.ports import TopicJournal, TopicJournals
from sagacity.privacy._keys import KeyService
from sagacity.signing._writer_signature import WriterKey, WriterRegistry


def not_handed(data: bytes, *, keys: KeyService | None = None) -> JournalEntry:
    """The decoder of a service handed none: refuses (:meth:`CompensationService.start`
    refuses first)."""
    raise ConfigurationError("no decoder handed (sagacity.compose.compensation)")


class WorkerJournals:
    """Makes, keeps and closes the service's journals.

    Args:
        make: makes a journal on the topic (the service's dependencies'; ``None``: none was
            handed, and :meth:`new` refuses).
        writer_id: who the journals write as.
        writer_key: the service's writer signing key (``None``: unsigned).
        writers: the writer registry events are read against.
    """

    def __init__(
        self,
        make: TopicJournals | None,
        *,
        writer_id: str,
        writer_key: WriterKey | None,
        writers: WriterRegistry | None,
    ) -> None:
        self._make = make
        self._writer_id = writer_id
        self._writer_key = writer_key
        self._writers = writers
        self._lock = threading.Lock()
        self._journals: list[TopicJournal] = []
        self._local = threading.local()

    def new(self) -> TopicJournal:
        """A new journal, closed by :meth:`close`.

        Raises:
            ConfigurationError: no journals were handed.
        """
        if self._make is None:
            raise ConfigurationError("no journals handed (sagacity.compose.compensation)")
        journal = self._make(
            writer_id=self._writer_id, writer_key=self._writer_key, writers=self._writers
        )
        with self._lock:
            self._journals.append(journal)
        return journal

    def of_thread(self) -> TopicJournal:
        """This worker thread's journal: each has its own reader, so reads run in parallel."""
        journal: TopicJournal | None = getattr(self._local, "journal", None)
        if journal is None:
            journal = self.new()
            self._local.journal = journal
        return journal

    def drop_thread(self) -> None:
        """Close this worker thread's journal (its next step makes a new one)."""
        journal: TopicJournal | None = getattr(self._local, "journal", None)
        self._local.journal = None
        if journal is None:
            return
        with self._lock:
            if journal in self._journals:
                self._journals.remove(journal)
        with contextlib.suppress(Exception):
            journal.close()

    def __iter__(self) -> Iterator[TopicJournal]:
        """The journals open now."""
        with self._lock:
            return iter(list(self._journals))
