"""What the archive's tools read of the archived chains, whichever store holds them: the heads
a sweep of abandoned sagas proposes (:class:`ArchivedHeads`) and the hashes a replay compares
with the topic (:class:`ArchivedHashes`).  The Postgres archive implements both
(``sagacity.postgres.archive.PostgresArchiveReads``).

Both read what a database operator could have written: the sweep only proposes (each
candidate's lease is judged on the topic), and the replay reports the archive's rows against
the chains it read from the topic itself.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Protocol


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
