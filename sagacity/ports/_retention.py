"""The archive's expired months as retention exports, signs and drops them, whichever store
holds them (docs/adr/0006-archive-and-checkpoints.md): the months (:class:`ArchiveMonth`),
one month's export-and-drop transaction (:class:`RetentionUnit`) and the signing of records
left unsigned (:class:`RecordSigning`), behind :class:`RetentionMonths`.  The Postgres
archive implements it (``sagacity.postgres.archive.PostgresRetention``).

What a record says and signs (its message, the anchors' Merkle root, the key) is the archive
service's; the store only reads the rows, keeps the record and drops the month.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, kw_only=True)
class ArchiveMonth:
    """One month of the archived journal: its name and time range (microseconds)."""

    name: str
    range_from_us: int
    range_to_us: int


@dataclass(frozen=True, kw_only=True)
class UnsignedMonth:
    """A month dropped before its record was signed, as the record stored it."""

    name: str
    range_from_us: int
    range_to_us: int
    row_count: int
    export_sha256: str


class SignedRecordFields(Protocol):
    """A signed retention record as the store keeps it (the archive service's
    ``RetentionRecord``)."""

    @property
    def partition_name(self) -> str: ...
    @property
    def range_from_us(self) -> int: ...
    @property
    def range_to_us(self) -> int: ...
    @property
    def row_count(self) -> int: ...
    @property
    def export_sha256(self) -> str: ...
    @property
    def anchor_count(self) -> int: ...
    @property
    def anchors_root(self) -> str: ...
    @property
    def signed_at_us(self) -> int: ...
    @property
    def key_id(self) -> str: ...
    @property
    def signature(self) -> str | None: ...


class RetentionUnit(Protocol):
    """One month's transaction, the month locked: nothing is kept or dropped unless it
    commits."""

    def export_lines(self) -> AbstractContextManager[Iterator[str]]:
        """The month's rows, one JSON object each, by saga then archive order."""
        ...

    def anchors(self) -> AbstractContextManager[Iterator[tuple[str, int, str]]]:
        """``(saga_id, seq, hash)`` of each saga's last row in the month, in leaf order (saga
        id byte order)."""
        ...

    def register_key(self, key_id: str, public_hex: str) -> None:
        """Keep the signing key's public half (once per key id)."""
        ...

    def store_record(self, record: SignedRecordFields, *, export_file: str) -> None:
        """Keep the month's signed record and its anchors (as :meth:`anchors` reads them)."""
        ...

    def drop(self) -> None:
        """Drop the month, committed with the transaction."""
        ...


class RecordSigning(Protocol):
    """One transaction signing the records left unsigned."""

    def unsigned_months(self) -> list[UnsignedMonth]:
        """The months whose record is not signed, by name."""
        ...

    def register_key(self, key_id: str, public_hex: str) -> None:
        """Keep the signing key's public half (once per key id)."""
        ...

    def leaf_ordered_anchors(self, month: str) -> list[tuple[str, int, str]]:
        """Number ``month``'s anchors in leaf order (saga id byte order, then seq) and return
        ``(saga_id, seq, hash)`` in that order."""
        ...

    def store_signature(self, record: SignedRecordFields) -> None:
        """Keep ``record``'s anchors count and root, time, key and signature on its month."""
        ...


class RetentionMonths(Protocol):
    """The archive's months as retention handles them.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed (nothing is kept).
    """

    def months(self) -> list[ArchiveMonth]:
        """The journal's months, oldest first (read in a transaction of its own)."""
        ...

    def row_count(self, month: ArchiveMonth) -> int:
        """How many rows ``month`` holds (in a transaction of its own)."""
        ...

    def dropping(self, month: ArchiveMonth) -> AbstractContextManager[RetentionUnit]:
        """A transaction with ``month`` locked, committed on leaving."""
        ...

    def signing(self) -> AbstractContextManager[RecordSigning]:
        """A transaction signing the unsigned records, committed on leaving."""
        ...
