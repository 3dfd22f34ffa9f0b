"""The compensation service's Kafka journals: one to learn the topic's layout, one per worker.

Each worker thread has a journal of its own (its own reader, so the sagas' reads run in
parallel); an ``ERASED`` makes every one of them forget what it opened of the saga.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from sagacity.consumers.compensation._job import WRITER_PREFIX
from sagacity.consumers.compensation._settings import CompensationSettings
from sagacity.ports import SagaIndex
from sagacity.producer import KafkaJournal
from sagacity.schemas._sealed import FieldSealer
from sagacity.signing._writer_signature import WriterKey, WriterRegistry


class KafkaJournals:
    """Makes, keeps and closes the service's journals.

    Args:
        settings: the service's settings (the broker, the topic, the read index).
        keys: opens sealed sagas and seals what the service journals for them.
        index: makes each journal's read index (the service's dependencies').
        writer_key: the service's writer signing key (``None``: unsigned).
        writers: the writer registry events are read against.
    """

    def __init__(
        self,
        settings: CompensationSettings,
        *,
        keys: FieldSealer | None,
        index: Callable[[], SagaIndex | None],
        writer_key: WriterKey | None,
        writers: WriterRegistry | None,
    ) -> None:
        self._settings = settings
        self._keys = keys
        self._index = index
        self._writer_key = writer_key
        self._writers = writers
        self._lock = threading.Lock()
        self._journals: list[KafkaJournal] = []
        self._local = threading.local()

    def new(self) -> KafkaJournal:
        """A new journal, closed by :meth:`close`."""
        s = self._settings
        journal = KafkaJournal(
            s.bootstrap_servers,
            topic=s.topic,
            client=dict(s.client),
            writer_id=f"{WRITER_PREFIX}{s.group_id}",
            index=self._index(),
            writer_key=self._writer_key,
            keys=self._keys,
            journal_name=s.journal_name,
            writers=self._writers,
        )
        with self._lock:
            self._journals.append(journal)
        return journal

    def of_thread(self) -> KafkaJournal:
        """This worker thread's journal: each has its own reader, so reads run in parallel."""
        journal: KafkaJournal | None = getattr(self._local, "journal", None)
        if journal is None:
            journal = self.new()
            self._local.journal = journal
        return journal

    def drop_thread(self) -> None:
        """Close this worker thread's journal (its next step makes a new one)."""
        journal: KafkaJournal | None = getattr(self._local, "journal", None)
        self._local.journal = None
        if journal is None:
            return
        with self._lock:
            if journal in self._journals:
                self._journals.remove(journal)
        with contextlib.suppress(Exception):
            journal.close()

    def __iter__(self) -> Iterator[KafkaJournal]:
        """The journals open now."""
        with self._lock:
            return iter(list(self._journals))
