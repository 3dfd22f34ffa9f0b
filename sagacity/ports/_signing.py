"""The archive's signing of checkpoint rounds, whichever store holds them
(docs/adr/0012-checkpoint-rounds.md, docs/adr/0015-round-log.md): one round is one transaction
(:class:`SigningUnit`), signers of one archive taking turns, behind
:class:`CheckpointSigning`.  The Postgres archive implements it
(``sagacity.postgres.archive.PostgresCheckpointSigning``).

What is signed is the archive service's: the heads come from what it read on the topic (its
ledger), the round's root and message from its own Merkle log, checked against the last signed
root before it is extended; the store only keeps the round, its checkpoints and the findings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from sagacity.ports._archive_reads import StoredFinding
from sagacity.ports._rounds import RoundLog, RoundRow


class SignedRoundFields(Protocol):
    """A signed round as the store keeps it (the archive service's ``SignedRound``)."""

    @property
    def round_id(self) -> int: ...
    @property
    def leaf_count(self) -> int: ...
    @property
    def root(self) -> str: ...
    @property
    def prev_root(self) -> str: ...
    @property
    def signed_at_us(self) -> int: ...
    @property
    def key_id(self) -> str: ...
    @property
    def signature(self) -> str: ...
    @property
    def format(self) -> int: ...
    @property
    def tree_size(self) -> int | None: ...


class SigningUnit(Protocol):
    """One signing round's transaction, this signer alone on the archive: nothing is kept
    unless it commits."""

    @property
    def log(self) -> RoundLog:
        """The rounds and their leaves, read in this transaction."""
        ...

    def table_heads(self, saga_ids: Collection[str]) -> dict[str, tuple[int, str]]:
        """The head table's ``(seq, hash)`` of each saga of ``saga_ids`` it holds, its rows
        locked until the round commits."""
        ...

    def signed_by(self, heads: Sequence[tuple[str, int, str]], key_id: str) -> set[tuple[str, int]]:
        """``(saga_id, seq)`` of the heads of ``heads`` already checkpointed under
        ``key_id``."""
        ...

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        """Keep ``findings`` (append-only), committed with the round."""
        ...

    def last_round(self) -> RoundRow | None:
        """The last round signed (``None``: none yet)."""
        ...

    def next_round_id(self) -> int:
        """A new round id, never given before."""
        ...

    def record_round(
        self, signed: SignedRoundFields, *, frontier: str, heads: Sequence[tuple[str, int, str]]
    ) -> None:
        """Keep ``signed`` with the log's ``frontier`` after it, one checkpoint per head of
        ``heads`` (in leaf order) and each saga's checkpointed seq."""
        ...


class CheckpointSigning(Protocol):
    """The archive's signing rounds.

    Raises (each method):
        PersistenceError: the store failed (nothing of that transaction is kept).
    """

    def register_key(self, key_id: str, public_hex: str) -> None:
        """Keep the signing key's public half (once per key id), in a transaction of its
        own."""
        ...

    def signing_round(self) -> AbstractContextManager[SigningUnit]:
        """A round's transaction, signers of the archive taking turns; committed on
        leaving."""
        ...

    def record_signed_offsets(
        self, consumer_group: str, offsets: Mapping[tuple[str, int], int]
    ) -> None:
        """Move each ``(topic, partition)``'s signed offset of ``consumer_group`` up to
        ``offsets``' (never down), in a transaction of its own."""
        ...
