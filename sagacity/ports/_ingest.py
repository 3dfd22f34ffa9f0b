"""The archive's ingest of a batch read from the topic, whichever store holds it
(docs/adr/0006-archive-and-checkpoints.md): one batch is one transaction
(:class:`IngestBatch`), behind :class:`ArchiveIngest`, which also gives the archiver's stored
positions, its findings of moved heads and its signing rounds on the same store.  The
Postgres archive implements it (``sagacity.postgres.archive.PostgresArchiveIngest``).

What is written is decided by the archive service (the chain's acceptance rule, the
quarantine reasons, the writers' rule); the store reads the heads and hashes it is asked
for and writes what it is handed, and says which failures a retry may cure.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sagacity.ports._archive_reads import ArchivedEvents, HeadFindings, StoredFinding
from sagacity.ports._rounds import RoundLog
from sagacity.ports._signing import CheckpointSigning


class ReadMessage(Protocol):
    """A message read from the topic, as the quarantine and the positions keep it."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class QuarantinedMessage(Protocol):
    """A refused message as the quarantine keeps it."""

    @property
    def reason(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def event(self) -> ReadMessage: ...
    @property
    def saga_id(self) -> str | None: ...
    @property
    def seq(self) -> int | None: ...


class HeadConflictError(Exception):
    """Another archiver moved a head this batch read; the batch is re-classified and
    retried (raised by :meth:`IngestBatch.move_heads`)."""


class IngestRetry(enum.Enum):
    """A refused batch a retry may cure."""

    MONTH_DROPPED = "month_dropped"
    """A month the store was known to hold is gone (retention dropped it)."""
    ROW_CONFLICT = "row_conflict"
    """Another archiver wrote some of the batch's rows first."""


class IngestBatch(Protocol):
    """One batch's transaction: nothing is kept unless it commits."""

    @property
    def events(self) -> ArchivedEvents:
        """The archived events, read in this transaction."""
        ...

    @property
    def round_log(self) -> RoundLog:
        """The signing rounds and checkpoints, read in this transaction."""
        ...

    def read_heads(self, saga_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """The archived head ``(seq, hash)`` of each saga of ``saga_ids`` the store holds."""
        ...

    def archived_hashes(self, pairs: Collection[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The archived hash at each ``(saga_id, seq)`` of ``pairs`` the store holds, read
        together when there are many; for a few it may give none (the caller asks
        :meth:`archived_hash` for each one missing)."""
        ...

    def archived_hash(self, saga_id: str, seq: int) -> str | None:
        """The archived hash of ``saga_id`` at ``seq``, if held."""
        ...

    def make_months(self, months: Mapping[int, int]) -> dict[int, str]:
        """Make the month partitions ``months`` names (month -> a time in it) not made yet on
        this connection; those the store refused (not a lost connection), with why."""
        ...

    def write_rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Append the accepted rows, each with ``columns``' values."""
        ...

    def move_heads(
        self, known: Mapping[str, tuple[int, str]], heads: Mapping[str, tuple[int, str]]
    ) -> None:
        """Move each saga's head from ``known`` (as read) to ``heads``.

        Raises:
            HeadConflictError: another archiver moved a head read here.
        """
        ...

    def quarantine(self, refusals: Sequence[QuarantinedMessage]) -> dict[str, int]:
        """Keep the refused messages with their reasons; how many per reason."""
        ...

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        """Keep ``findings`` (append-only)."""
        ...

    def store_offsets(self, group: str, batch: Sequence[ReadMessage]) -> None:
        """Keep the batch's positions for ``group`` (the last statement of the batch)."""
        ...


class ArchiveIngest(Protocol):
    """The store the archiver writes (one connection, made again after a loss), made by the
    composition root from the archive's database URL (``Dependencies.archive_store``).

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceUnavailableError: the store went away (retryable).
        PersistenceError: the store refused or failed.
    """

    def prepare(self) -> None:
        """Create or upgrade the archive's schema where it is older than this release (on a
        connection of its own, closed after)."""
        ...

    def batch(self) -> AbstractContextManager[IngestBatch]:
        """One batch's transaction, committed on leaving."""
        ...

    def offsets(self, group: str, topic: str) -> dict[int, tuple[int, int]]:
        """Per partition of ``topic``, the stored next offset and the signed one for
        ``group``."""
        ...

    def head_findings(self) -> HeadFindings:
        """The archived heads and findings, on the store's connection."""
        ...

    def signing(self) -> CheckpointSigning:
        """The signing rounds, on the store's connection."""
        ...

    def retry_of(self, exc: BaseException) -> IngestRetry | None:
        """Whether a retry of the batch ``exc`` refused may cure it, and why."""
        ...

    def reset(self) -> None:
        """Forget the connection (after a failure): the next use makes a new one."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...
