"""The read index's port and values, declared in :mod:`sagacity.ports` (ADR 0010)."""

from __future__ import annotations

from sagacity.ports import IndexedEvent, IndexedPartition, IndexedSaga, RefusedMessage, SagaIndex

__all__ = ["IndexedEvent", "IndexedPartition", "IndexedSaga", "RefusedMessage", "SagaIndex"]
