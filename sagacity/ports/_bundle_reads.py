"""One saga's evidence as an audit bundle exports it, whichever store holds it
(docs/adr/0017-audit-coverage.md): its rows, checkpoints, their rounds and its retention
anchor, read in one snapshot (:class:`BundleSnapshot`), behind :class:`SagaBundleReads`.  The
Postgres archive implements it (``sagacity.postgres.archive.PostgresSagaBundles``, which is
also the :class:`~sagacity.ports.ArchiveAudits` the bundle's own audit reads).

The proofs, the manifest and the bundle's verdict are the archive service's; whatever a
database operator wrote is checked by the bundle's verifier, never trusted.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from sagacity.ports._audit import ArchiveAudits
from sagacity.ports._rounds import RoundLog


class BundleSnapshot(Protocol):
    """One saga's evidence in one read-only snapshot."""

    @property
    def round_log(self) -> RoundLog:
        """The signing rounds, in this snapshot."""
        ...

    def rows(self) -> list[tuple[Any, ...]]:
        """The saga's rows in archived order: ``saga_id, seq, event_type, tool, payload,
        result, error, actor, attributes`` (a JSON value), ``recorded_at_us, prev_hash,
        hash``, then ``form, commitments, salts`` where the archive holds forms."""
        ...

    def checkpoints(self) -> list[tuple[Any, ...]]:
        """The saga's checkpoints by seq then signing time: ``seq, hash, signed_at_us,
        key_id, signature, round_id, leaf_index``."""
        ...

    def last_anchor(self) -> tuple[int, str, str | None, int | None] | None:
        """The saga's last retention anchor: ``seq, hash, partition_name, leaf_index`` (the
        last two ``None`` in an archive older than signed records); ``None``: none."""
        ...

    def retention_record(self, partition_name: str) -> tuple[Any, ...] | None:
        """The retention record of ``partition_name`` (the Postgres archive's
        ``RECORD_COLUMNS``), if held."""
        ...

    def anchors_of(self, partition_name: str) -> list[tuple[str, int, str]]:
        """``(saga_id, seq, hash)`` of the anchors of ``partition_name``, by leaf index."""
        ...


class SagaBundleReads(ArchiveAudits, Protocol):
    """One saga's evidence as a bundle exports it, and the archive as its audit reads it.

    Raises (each method):
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the store failed.
    """

    def bundle_snapshot(self, saga_id: str) -> AbstractContextManager[BundleSnapshot]:
        """A read-only snapshot of ``saga_id``'s evidence; closed on leaving."""
        ...
