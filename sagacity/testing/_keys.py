"""The key store in process memory (:class:`~sagacity.ports.KeyStore`)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from sagacity.ports import StoredKey


class InMemoryKeyStore:
    """The :class:`~sagacity.ports.KeyStore` port in process memory, for tests and
    single-process use.

    Behaves as the Postgres store does (the same contract suite runs against both): one row per
    saga, the first creator wins, an erasure keeps a marker and happens once, a rewrap replaces
    a key only if unchanged.  Keys last as long as the process.
    """

    def __init__(self) -> None:
        self._rows: dict[str, StoredKey] = {}
        self._lock = threading.Lock()
        self._made = False

    def ensure_schema(self) -> None:
        """Nothing to create: the store exists from now on."""
        self._made = True

    def exists(self) -> bool:
        """Whether :meth:`ensure_schema` was called (as the Postgres store's table)."""
        return self._made or bool(self._rows)

    def load(self, saga_id: str) -> StoredKey | None:
        """The saga's row, or ``None``."""
        with self._lock:
            return self._rows.get(saga_id)

    def create(self, saga_id: str, *, kek_id: str, wrapped: bytes) -> StoredKey:
        """Store the saga's first key, or return the row already there."""
        with self._lock:
            return self._rows.setdefault(
                saga_id, StoredKey(saga_id=saga_id, kek_id=kek_id, wrapped=wrapped)
            )

    def destroy(self, saga_id: str, *, actor: str, reason: str) -> tuple[StoredKey, bool, bool]:
        """Erase the saga's key (a marker row when it had none), once."""
        with self._lock:
            found = self._rows.get(saga_id)
            if found is not None and found.erased:
                return found, False, True
            erased = StoredKey(
                saga_id=saga_id,
                kek_id=None,
                wrapped=None,
                erased_at=datetime.now(UTC),
                erased_by=actor,
                reason=reason,
            )
            self._rows[saga_id] = erased
            return erased, True, found is not None

    def pending_rewrap(
        self, *, kek_ids: tuple[str, ...], after: str, limit: int
    ) -> list[StoredKey]:
        """Live keys under one of ``kek_ids``, by saga id after ``after``."""
        with self._lock:
            rows = sorted(
                (r for r in self._rows.values() if r.kek_id in kek_ids and r.saga_id > after),
                key=lambda r: r.saga_id,
            )
        return rows[:limit]

    def rewrap(
        self, saga_id: str, *, old_kek_id: str, old_wrapped: bytes, kek_id: str, wrapped: bytes
    ) -> bool:
        """Replace the wrapped key if unchanged since it was read."""
        with self._lock:
            found = self._rows.get(saga_id)
            if found is None or (found.kek_id, found.wrapped) != (old_kek_id, old_wrapped):
                return False
            self._rows[saga_id] = StoredKey(saga_id=saga_id, kek_id=kek_id, wrapped=wrapped)
            return True

    def count_by_kek(self) -> dict[str, int]:
        """How many live keys each KEK wraps."""
        counts: dict[str, int] = {}
        with self._lock:
            for row in self._rows.values():
                if row.kek_id is not None:
                    counts[row.kek_id] = counts.get(row.kek_id, 0) + 1
        return counts

    def kek_ids(self) -> set[str]:
        """The KEKs live keys are wrapped under."""
        return set(self.count_by_kek())

    def close(self) -> None:
        """Nothing to release."""
