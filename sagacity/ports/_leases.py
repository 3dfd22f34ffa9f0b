"""The writer lease of a live saga, as a sweep of abandoned sagas judges and takes it over on
the topic: the part of ``sagacity.producer.KafkaJournal`` that ``sagacity saga sweep`` hands
the archive's sweep (docs/adr/0011-writer-lease.md)."""

from __future__ import annotations

from typing import Protocol

from sagacity.entries._events import JournalEntry


class LeaseState(Protocol):
    """What a taker knows of a live saga's lease (``sagacity.producer``'s ``LeaseView``)."""

    @property
    def writer(self) -> str | None: ...
    @property
    def last_event_age_s(self) -> float: ...
    @property
    def expires_in_s(self) -> float | None:
        """Seconds until a takeover is allowed (``None``: no lease was recorded)."""
        ...

    @property
    def expired(self) -> bool: ...


class TakenOver(Protocol):
    """A confirmed takeover: the event that handed the saga over, and the lease judged."""

    @property
    def entry(self) -> JournalEntry: ...
    @property
    def lease(self) -> LeaseState: ...


class WriterLeases(Protocol):
    """Judges and takes over live sagas' writer leases on the topic.

    Raises (each method):
        SagaNotLiveError: no writer holds the saga.
        JournalUnavailableError: the topic could not be read or written.
    """

    def lease(self, saga_id: str) -> LeaseState:
        """The lease of the saga's writer, judged on the journal's wall clock."""
        ...

    def take_over(
        self, saga_id: str, *, reason: str, force: bool = False, actor: str | None = None
    ) -> TakenOver:
        """Take the saga from a writer presumed gone, handing it to compensation.

        Raises:
            LeaseHeldError: the lease has not expired and not ``force``.
            TailMovedError: the chain moved while taking over.
            SerializationError: ``reason`` is empty or not text.
        """
        ...
