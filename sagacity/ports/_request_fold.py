"""The approvals request consumer's batch: what it folds from the topic, what it quarantines
and the positions it stores, kept together (:meth:`FoldingRequestStore.folding`; in
PostgreSQL one transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sagacity.chain._acceptance import Refusal, Tail
from sagacity.entries._events import JournalEntry
from sagacity.ports._requests import RequestStore


@dataclass(frozen=True, kw_only=True)
class Fault:
    """Why the projection set an event aside for a reason of the message itself, not of its
    chain's links: its sealed fields cannot be opened (``kind`` the error's
    :attr:`~sagacity.errors.UnopenableError.reason`), or the database refused its values
    (``refused_by_database``)."""

    kind: str
    detail: str


class RequestFold(Protocol):
    """One batch of the approvals request consumer, in one transaction: what it folds and the
    positions it stores commit together (:meth:`FoldingRequestStore.folding`)."""

    def fold(
        self,
        entry: JournalEntry,
        *,
        saga_id: str,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | Fault | None:
        """Fold one message of the topic, isolated from the rest of the batch: a refusal or a
        fault it is quarantined with (the batch goes on), ``None`` when applied."""
        ...

    def quarantine(
        self, entry: JournalEntry, fault: Fault, *, saga_id: str, position: tuple[int, int] | None
    ) -> bool:
        """Keep ``entry`` in the quarantine with ``fault``; ``False`` when even that row is
        refused (the caller logs and counts it)."""
        ...

    def store_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """Record the consumer's position on ``topic``, committed with what the batch folded."""
        ...


@runtime_checkable
class FoldingRequestStore(RequestStore, Protocol):
    """A request store the approvals request consumer folds the topic into."""

    def offsets(self, topic: str) -> dict[int, int]:
        """The positions stored for ``topic``'s partitions."""
        ...

    def folding(self) -> AbstractContextManager[RequestFold]:
        """A batch in one transaction: committed when the block returns, rolled back when it
        raises."""
        ...
