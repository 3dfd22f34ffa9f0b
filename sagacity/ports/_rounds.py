"""The log of signing rounds as the archive service reads it, whichever store holds it
(docs/adr/0012-checkpoint-rounds.md, docs/adr/0015-round-log.md): the rounds
(:class:`RoundRow`), the checkpoints (:class:`CheckpointRow`) and the leaves of the log, behind
:class:`RoundLog`.  The Postgres archive implements it
(``sagacity.postgres.archive.PostgresRoundLog``).

Every value is read from a table a database operator could write: the service verifies each
round's signature with a pinned key and rebuilds each root from the leaves (a stored frontier
is a shortcut it checks against the signed root), so a forged row gives a round that does not
verify, never a false one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, kw_only=True)
class RoundRow:
    """A signing round as stored: what its signature covers, and the log's frontier after it
    (not signed; ``None`` for rounds of the first format or an archive older than the log)."""

    round_id: int
    leaf_count: int
    root: str
    prev_root: str
    signed_at_us: int
    key_id: str
    signature: str
    format: int
    tree_size: int | None
    frontier: str | None


@dataclass(frozen=True, kw_only=True)
class CheckpointRow:
    """A checkpoint as stored: a leaf of a round, or a head signed on its own."""

    saga_id: str
    seq: int
    hash: str
    signed_at_us: int
    key_id: str
    signature: str | None
    round_id: int | None
    leaf_index: int | None


class RoundLog(Protocol):
    """The stored signing rounds and their checkpoints.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed.
    """

    def rounds_after(self, round_id: int, *, limit: int | None) -> list[RoundRow]:
        """The rounds after ``round_id``, oldest first, at most ``limit`` (empty for an
        archive older than signing rounds)."""
        ...

    def round(self, round_id: int) -> RoundRow | None:
        """One round, or ``None`` when the store does not hold it."""
        ...

    def previous_round_id(self, round_id: int) -> int | None:
        """The id of the round before ``round_id`` (``None``: it is the first)."""
        ...

    def log_leaves(
        self, *, after: int | None, upto: int, fetch: int = 10_000
    ) -> AbstractContextManager[Iterator[tuple[str, int, str]]]:
        """``(saga_id, seq, hash)`` of the checkpoints of the rounds ``after`` < round <=
        ``upto`` (``after`` ``None``: every round), in log order (round, then leaf)."""
        ...

    def round_leaves(self, round_id: int) -> list[tuple[int, str, int, str]]:
        """``(leaf_index, saga_id, seq, hash)`` of round ``round_id``'s checkpoints, by leaf
        index."""
        ...

    def checkpoints_of(
        self, saga_ids: Collection[str], key_ids: Collection[str]
    ) -> list[CheckpointRow]:
        """The checkpoints of ``saga_ids`` under ``key_ids``, by saga, highest seq first."""
        ...

    def transaction(self, action: str) -> AbstractContextManager[None]:
        """The reads inside it in one transaction (``action`` names it in an error)."""
        ...


class RoundStreams(Protocol):
    """The signing rounds and their leaves as an audit walks them, in the caller's snapshot."""

    def round_streams(
        self, *, saga_id: str | None, fetch: int, version: int
    ) -> AbstractContextManager[tuple[Iterator[tuple[Any, ...]], Iterator[tuple[Any, ...]]]]:
        """Two streams, ``fetch`` rows a fetch, of an archive at schema ``version``: the rounds
        in id order (``round_id, leaf_count, root, prev_root, signed_at_us, key_id,
        signature, format, tree_size``, then for one saga the round before each: ``round_id,
        root, format, tree_size, frontier``, else five ``NULL`` s), and their checkpoints
        (``round_id, leaf_index, saga_id, seq, hash, signed_at_us, key_id``) in round and leaf
        order; with ``saga_id``, only the rounds its checkpoints belong to.

        Raises:
            PersistenceError: the store failed.
        """
        ...
