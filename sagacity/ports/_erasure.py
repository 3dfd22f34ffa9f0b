"""The archive's side of an erasure (docs/adr/0019-erasure.md §4): what the archive holds of
a saga, and clearing it.  ``sagacity erase`` composes it with the journal, the key store and
the services' tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class ArchiveErasure:
    """What one erasure of a saga in the archive did.

    Attributes:
        saga_id: the saga.
        erased: the data fields whose openings this call cleared, by seq (empty when an
            earlier erasure, or an ingest without keys, left none).
        quarantined: quarantined messages of the saga whose bytes this call cleared.
        logged: this call logged the erasure in the archive.
        rows: the saga's rows in the archive.
    """

    saga_id: str
    erased: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    quarantined: int = 0
    logged: bool = False
    rows: int = 0


@runtime_checkable
class ErasableArchive(Protocol):
    """The archive as an erasure uses it."""

    def archived(self, saga_id: str) -> int:
        """How many events of the saga the archive holds.

        Raises:
            ArchiveSchemaError: there is no archive.
        """
        ...

    def recorded_key_id(self, saga_id: str) -> str | None:
        """The KEK id an earlier erasure of the saga logged (``None``: none logged one)."""
        ...

    def erase(self, saga_id: str, *, actor: str, reason: str, key_id: str) -> ArchiveErasure:
        """Clear the saga's openings and quarantined bytes, log the erasure and re-sample the
        statistics of the columns cleared, in one transaction; idempotent.

        Raises:
            ErasureRefusedError: the saga is in chain form 1 (nothing was changed).
            ArchiveSchemaError: the archive predates erasure.
            PersistenceError: the database refused or could not be reached.
        """
        ...
