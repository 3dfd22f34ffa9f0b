"""What the archive service and its tools read of the archived chains, whichever store holds
them: the heads a sweep of abandoned sagas proposes (:class:`ArchivedHeads`), the hashes a
replay compares with the topic (:class:`ArchivedHashes`), the events a saga's writers are
folded from (:class:`ArchivedEvents`) and the destroyed data keys an audit of erasures
compares with the chains (:class:`DestroyedKeyReads`); the archiver's findings of heads moved
by others (:class:`HeadFindings`); one saga's rows, which an audit judges by the reference
path (:class:`SagaRows`); and the signed retention records with their anchors
(:class:`RetentionStreams`).  The Postgres archive implements them
(``sagacity.postgres.archive.PostgresArchiveReads``).

Both read what a database operator could have written: the sweep only proposes (each
candidate's lease is judged on the topic), and the replay reports the archive's rows against
the chains it read from the topic itself.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sagacity.entries._events import JournalEntry


@dataclass(frozen=True, kw_only=True)
class ArchivedHead:
    """A saga's archived head: its last event's seq, type and recorded time."""

    saga_id: str
    seq: int
    event_type: str
    recorded_at_us: int


class ArchivedHeads(Protocol):
    """The archived sagas' heads.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed.
    """

    def quiet_heads(
        self, *, topic: str, recorded_before_us: int, excluding: Collection[str], limit: int
    ) -> list[ArchivedHead]:
        """The heads of ``topic``'s sagas recorded before ``recorded_before_us`` whose event
        type is not in ``excluding``, oldest first, at most ``limit``."""
        ...


class ArchivedHashes(Protocol):
    """The hashes of the archived events.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed.
    """

    def archived_hashes(
        self, *, topic: str, saga_id: str | None = None
    ) -> Iterator[tuple[str, int, str]]:
        """``(saga_id, seq, hash)`` of every archived event of ``topic`` (of one saga with
        ``saga_id``), in one snapshot."""
        ...


@dataclass(frozen=True, kw_only=True)
class WriterEvent:
    """What the writers' rule reads of an archived event (``sagacity.signing``'s
    ``WrittenEvent``): its saga, type, actor and the attributes the rule reads."""

    saga_id: str
    event_type: str
    actor: str | None
    attributes: Mapping[str, str] = field(default_factory=dict)


class ArchivedEvents(Protocol):
    """The archived events of sagas, as the archive's ingest folds their writers.

    Raises (each method):
        PersistenceError: the store failed.
    """

    def writer_events(
        self, saga_ids: Collection[str], event_types: Collection[str]
    ) -> list[WriterEvent]:
        """The archived events of ``saga_ids`` whose type is in ``event_types``, by saga,
        each saga's in seq order."""
        ...

    def archived_entries(self, up_to: Mapping[str, int]) -> list[JournalEntry]:
        """The archived entries of each saga of ``up_to`` with a seq at most its bound, by
        saga, each saga's in seq then archive order (a saga may hold several at a seq).

        Raises:
            SerializationError: a row is not an entry.
        """
        ...


@dataclass(frozen=True, kw_only=True)
class DestroyedKey:
    """A saga's data key the key store destroyed: when and by whom it says."""

    saga_id: str
    erased_at: datetime
    erased_by: str | None


@dataclass(frozen=True, kw_only=True)
class ErasedEvent:
    """An archived ``ERASED`` row, as its operator signature covers it (``attributes``: the
    column's JSON text, read by the service)."""

    saga_id: str
    seq: int
    event_type: str
    prev_hash: str
    actor: str | None
    recorded_at_us: int
    attributes: str


@dataclass(frozen=True, kw_only=True)
class DestroyedKeys:
    """What the store says of the destroyed data keys.

    Attributes:
        readable: the key table is beside the archive and may be read (else ``keys`` is
            empty).
        hidden: the key table is there but may not be read: destroyed keys are not known.
        keys: the destroyed keys (of one saga, or all), by saga id.
        erased: the archived ``ERASED`` rows of those keys' sagas, when asked for.
    """

    readable: bool = False
    hidden: bool = False
    keys: tuple[DestroyedKey, ...] = ()
    erased: tuple[ErasedEvent, ...] = ()


class DestroyedKeyReads(Protocol):
    """The destroyed data keys beside the archive, and their sagas' archived erasures."""

    def destroyed_keys(
        self, saga_id: str | None = None, *, with_erased: bool = False
    ) -> DestroyedKeys:
        """The destroyed keys (of ``saga_id``, or all); with ``with_erased``, the archived
        ``ERASED`` rows of their sagas too, read in the same transaction.

        Raises:
            ArchiveSchemaError: the store is not an archive.
            PersistenceError: the store failed.
        """
        ...


class StoredFinding(Protocol):
    """A finding as the store keeps it (the archive service's ``Finding``): its reason, the
    saga, a sentence, the head the archiver attested and the table's."""

    @property
    def reason(self) -> str: ...
    @property
    def saga_id(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def ingested(self) -> tuple[int, str] | None: ...
    @property
    def table(self) -> tuple[int, str] | None: ...


class FindingsUnit(Protocol):
    """One transaction of :class:`HeadFindings`."""

    def unsigned_heads(self) -> list[tuple[str, int, str]]:
        """``(saga_id, seq, hash)`` of every archived head past the last signed one."""
        ...

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        """Keep ``findings`` (append-only), committed with the transaction."""
        ...


class HeadFindings(Protocol):
    """The archived heads and the archiver's findings, read and written in one transaction."""

    def finding(self, action: str) -> AbstractContextManager[FindingsUnit]:
        """A transaction (``action`` names it in an error), committed on leaving.

        Raises:
            PersistenceError: the store failed (nothing is kept).
        """
        ...


class SagaRows(Protocol):
    """One saga's archived rows, as an audit reads them again for the reference path, and
    each such row rebuilt as the entry it stores."""

    def entry_of(self, row: Sequence[Any], *, forms: bool) -> JournalEntry:
        """The entry a row of :meth:`saga_rows` (or of an audit's row stream) stores.

        Raises:
            SerializationError: the row is not an entry.
        """
        ...

    def saga_rows(self, saga_id: str, *, forms: bool) -> list[tuple[Any, ...]]:
        """The saga's rows in the order archived: the row columns (``sagacity.postgres.
        archive.ROW_COLUMNS``), followed with ``forms`` by the form columns.

        Raises:
            PersistenceError: the store failed.
        """
        ...


class RetentionStreams(Protocol):
    """The signed retention records and their anchors, as an audit checks them."""

    def retention_streams(
        self, *, saga_id: str | None, fetch: int
    ) -> AbstractContextManager[tuple[Iterator[tuple[Any, ...]], Iterator[tuple[Any, ...]]]]:
        """Two streams read in one snapshot, ``fetch`` rows a fetch: the records (the
        Postgres archive's ``RECORD_COLUMNS``) by partition name, and their anchors
        ``(partition_name, leaf_index, saga_id, seq, hash)`` by partition name then leaf
        index; those of one saga's partitions with ``saga_id``.

        Raises:
            PersistenceError: the store failed.
        """
        ...
