"""The archive as an audit reads it, whichever store holds it
(docs/adr/0017-audit-coverage.md): the schema version and the recorded signing keys, and one
read-only snapshot (:class:`AuditSnapshot`) holding the streams an audit merges saga by saga
(the chains' rows, checkpoints, retention anchors, heads), the rows by bulk blocks
(:class:`ChainBlocks`), the rounds and retention records, and the rows a saga's story is told
from, behind :class:`ArchiveAudits`.  The Postgres archive implements it
(``sagacity.postgres.archive.PostgresArchiveAudits``).

Every row is what a database operator could have written: the judgement (chains, rounds,
records, stories) is the archive service's; the store only reads, in one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from sagacity.ports._archive_reads import DestroyedKeyReads, RetentionStreams, SagaRows
from sagacity.ports._rounds import RoundLog, RoundStreams


class RowBatches(Protocol):
    """A stream of rows read a batch at a time."""

    def fetchmany(self, size: int) -> Sequence[tuple[Any, ...]]:
        """Up to ``size`` further rows (none: the stream is done)."""
        ...


class ChainBlocks(Protocol):
    """Every saga's rows as bulk blocks (a binary ``COPY`` of the row columns, in saga id
    then archive order), read on a second reader of the snapshot, started as soon as made."""

    def connected(self) -> bool:
        """Whether the second reader could be made (waits for the first block); if not, the
        rows are read through :meth:`AuditSnapshot.batches`."""
        ...

    def __iter__(self) -> Iterator[bytes]:
        """The blocks, once."""
        ...

    def close(self) -> None:
        """Stop the stream and close the second reader."""
        ...


class AuditSnapshot(Protocol):
    """One audit's read-only snapshot, of one saga or every saga (as it was opened); every
    stream it gives is closed with it."""

    @property
    def round_log(self) -> RoundLog:
        """The signing rounds and their leaves, in this snapshot."""
        ...

    @property
    def round_streams(self) -> RoundStreams:
        """The rounds and their leaves as an audit walks them, in this snapshot."""
        ...

    @property
    def saga_rows(self) -> SagaRows:
        """One saga's rows, in this snapshot."""
        ...

    @property
    def retention(self) -> RetentionStreams:
        """The signed retention records and their anchors, in this snapshot."""
        ...

    def chain_blocks(self) -> ChainBlocks:
        """The rows as bulk blocks (the form columns on the first row only), started now."""
        ...

    def decoded(self, blocks: Iterable[bytes]) -> Iterator[tuple[Any, ...]]:
        """The rows of :meth:`chain_blocks`' blocks, as :meth:`batches` ``(0)`` gives them.

        Raises:
            ValueError: the blocks are not the store's.
        """
        ...

    def batches(self, stream: int) -> RowBatches:
        """One of the four streams by saga id: ``0`` the rows (the row columns, then the form
        columns where the archive holds forms), ``1`` the checkpoints (``saga_id, seq, hash,
        signed_at_us, key_id, signature, round_id, leaf_index``), ``2`` each saga's last
        retention anchor (``saga_id, seq, hash, partition_name``), ``3`` the heads
        (``saga_id, head_seq, head_hash``)."""
        ...

    def anchor_rows(self) -> list[tuple[Any, ...]]:
        """Stream ``2`` read whole."""
        ...

    def story_rows(self, saga_id: str) -> list[tuple[Any, ...]]:
        """One saga's story rows, in seq order (``sagacity.postgres.archive.story_query``'s
        columns)."""
        ...


@dataclass(frozen=True, kw_only=True)
class ArchiveSchema:
    """What an archive's schema holds, as an audit reads it.

    Attributes:
        version: the schema version (handed back to the store's reads).
        forms: the rows carry chain forms (form, commitments, salts).
        rounds: the archive holds signing rounds.
        signed_records: the retention records are signed (their anchors are leaves).
    """

    version: int
    forms: bool
    rounds: bool
    signed_records: bool


class ArchiveAudits(Protocol):
    """The archive as an audit reads it.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed.
    """

    def schema(self) -> ArchiveSchema:
        """What the archive's schema holds."""
        ...

    def signing_keys(self) -> list[tuple[str, str]]:
        """``(key_id, public key hex)`` of every signing key the archive recorded."""
        ...

    def audit_snapshot(
        self, *, saga_id: str | None, fetch: int, version: int
    ) -> AbstractContextManager[AuditSnapshot]:
        """A read-only snapshot of ``saga_id`` (``None``: every saga) at schema ``version``,
        its streams read ``fetch`` rows a batch; closed on leaving."""
        ...


class SignedStories(Protocol):
    """The rows the stories of what signing rounds signed are told from."""

    def signed_story_rows(
        self, round_ids: Sequence[int]
    ) -> AbstractContextManager[Iterator[tuple[Any, ...]]]:
        """The story rows (as :meth:`AuditSnapshot.story_rows`) of every saga ``round_ids``
        signed, up to the highest seq they signed, in saga then seq order, in a transaction
        of their own.

        Raises:
            ArchiveSchemaError: the store is not an archive.
            PersistenceError: the store failed.
        """
        ...


class WatchedArchive(RoundLog, SignedStories, DestroyedKeyReads, Protocol):
    """The archive as ``audit watch`` reads it: its rounds, the stories of what they signed
    and the destroyed data keys beside it."""
