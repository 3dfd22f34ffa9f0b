"""The key store's port: where the per-saga data keys live, wrapped by a key-encryption key
(docs/adr/0019-erasure.md).  The key service (:class:`sagacity.keys.KeyService`) is written
against it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class StoredKey:
    """A saga's row in the key store.

    Attributes:
        saga_id: the saga.
        kek_id: the KEK its data key is wrapped under; ``None`` once erased.
        wrapped: the wrapped data key; ``None`` once erased.
        erased_at / erased_by / reason: when, by whom and why the key was destroyed.
    """

    saga_id: str
    kek_id: str | None
    wrapped: bytes | None
    erased_at: datetime | None = None
    erased_by: str | None = None
    reason: str | None = None

    @property
    def erased(self) -> bool:
        """The data key was destroyed."""
        return self.erased_at is not None


@runtime_checkable
class KeyStore(Protocol):
    """Where the wrapped data keys live (one row per saga, the erased ones kept as markers).

    The first creator of a saga's key wins, an erasure keeps a marker row and happens once
    (concurrent erasures included), and a rewrap replaces a key only if it is unchanged since
    it was read; the contract suite (:class:`sagacity.testing.contracts.KeyStoreContract`)
    holds every store to it.
    """

    def ensure_schema(self) -> None:
        """Create the store if missing (safe for instances starting together).

        Raises:
            PersistenceError: the store could not be reached or refused.
        """
        ...

    def exists(self) -> bool:
        """Whether the store has been made (:meth:`ensure_schema`); creates nothing, so a
        dry run reads nothing it would have to make.

        Raises:
            PersistenceError: the store could not be reached.
        """
        ...

    def load(self, saga_id: str) -> StoredKey | None:
        """The saga's row, or ``None``."""
        ...

    def create(self, saga_id: str, *, kek_id: str, wrapped: bytes) -> StoredKey:
        """Store the saga's first key; when a row exists already (a concurrent first use, or
        an erasure), return that row unchanged instead."""
        ...

    def destroy(self, saga_id: str, *, actor: str, reason: str) -> tuple[StoredKey, bool, bool]:
        """Erase the saga's key (a marker row when it had none); the row after, whether this
        call erased it, and whether a key existed. Concurrent calls erase once."""
        ...

    def pending_rewrap(
        self, *, kek_ids: tuple[str, ...], after: str, limit: int
    ) -> list[StoredKey]:
        """Live keys wrapped under one of ``kek_ids``, by saga id after ``after``."""
        ...

    def rewrap(
        self, saga_id: str, *, old_kek_id: str, old_wrapped: bytes, kek_id: str, wrapped: bytes
    ) -> bool:
        """Replace the saga's wrapped key if it is still ``old_wrapped`` (not erased or
        rewrapped meanwhile); whether it was replaced."""
        ...

    def count_by_kek(self) -> dict[str, int]:
        """How many live keys each KEK wraps."""
        ...

    def kek_ids(self) -> set[str]:
        """The KEKs live keys are wrapped under (cheap: read at every start-up)."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...
