"""One batch's view of its sagas beyond the table's heads: the head this process attested for
each (what it read from the topic), who may write each, and what it found the table to hold
that it did not write (docs/adr/0012-checkpoint-rounds.md, "The signer's input";
docs/adr/0014-signed-decisions-and-writers.md §5).

The batch classifies events against the table (the rows must stay consistent with it); this
plan follows, beside it, what the process itself saw.  Only that reaches the ledger, and so the
signer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import psycopg

from sagacity._events import GENESIS_HASH
from sagacity._writer_roles import SagaWriters
from sagacity.consumers.archive._findings import Finding, FindingReason, describe
from sagacity.consumers.archive._ledger import IngestLedger, LedgerEntry
from sagacity.consumers.archive._owners import writers_of

if TYPE_CHECKING:
    from sagacity.consumers.archive._attest import CheckpointVerifier
    from sagacity.consumers.archive._authorship import Authorship
    from sagacity.consumers.archive._rowcheck import _Checked

Head = tuple[int, str]
_GENESIS: Head = (0, GENESIS_HASH)


class BatchPlan:
    """Per saga of a batch: its attested head, its writers, and the findings.

    Args:
        ledger: what this process attested before the batch.
        verifier: heads signed under the archive's own key, for sagas the ledger lacks.
        conn: the batch's connection (inside its transaction).
        heads: the table's head of each saga of the batch (absent: no row yet).
        places: each saga's (topic, partition), from its messages.
        authorship: with a writer registry, the writers of each saga are followed.
    """

    def __init__(
        self,
        *,
        ledger: IngestLedger,
        verifier: CheckpointVerifier,
        conn: psycopg.Connection,
        heads: Mapping[str, Head],
        places: Mapping[str, tuple[str, int]],
        authorship: Authorship | None,
    ) -> None:
        self._places = places
        self._authorship = authorship
        self.findings: list[Finding] = []
        self.bases: dict[str, Head] = {}
        self.signed: dict[str, int] = {}
        self.flagged: set[str] = set()
        self.writers: dict[str, SagaWriters] = {}
        reload: dict[str, Head] = {}
        unknown: list[str] = []
        for saga_id in places:
            table = heads.get(saga_id)
            entry = ledger.get(saga_id)
            if entry is None:
                if table is None:
                    self.bases[saga_id], self.signed[saga_id] = _GENESIS, 0
                else:
                    unknown.append(saga_id)
                    reload[saga_id] = table
                continue
            self.bases[saga_id], self.signed[saga_id] = entry.attested, entry.signed
            if entry.flagged:
                self.flagged.add(saga_id)
            elif entry.table != table:
                self._flag(
                    FindingReason.HEAD_MOVED,
                    saga_id,
                    f"the table's head is {describe(table)}, not {describe(entry.table)} as "
                    "this archiver left it: something else changed the table; nothing past "
                    f"{describe(entry.attested)} is signed",
                    entry.attested,
                    table,
                )
            if entry.writers is not None and entry.table == table:
                self.writers[saga_id] = entry.writers
            elif table is not None:
                reload[saga_id] = table
        signed = verifier.signed_heads(conn, unknown) if verifier else {}
        for saga_id in unknown:
            base = signed.get(saga_id, _GENESIS)
            self.bases[saga_id], self.signed[saga_id] = base, base[0]
            table = heads[saga_id]
            if base[0] > table[0]:
                self._flag(
                    FindingReason.HEAD_MOVED,
                    saga_id,
                    f"the table's head is {describe(table)}, behind {describe(base)} which this "
                    "archive signed: rows were removed",
                    base,
                    table,
                )
        if authorship is not None and authorship.writers is not None:
            self.writers.update(writers_of(conn, reload))
            for saga_id in places:
                self.writers.setdefault(saga_id, SagaWriters())

    def _flag(
        self,
        reason: FindingReason,
        saga_id: str,
        detail: str,
        ingested: Head | None,
        table: Head | None,
    ) -> None:
        self.flagged.add(saga_id)
        self.findings.append(
            Finding(reason=reason, saga_id=saga_id, detail=detail, ingested=ingested, table=table)
        )

    # --- the batch's events, in order ---------------------------------------------------------
    def writer_refusal(self, item: _Checked) -> tuple[str, str] | None:
        """Why ``item``'s writer may not write it into its saga (``None``: it may)."""
        if self._authorship is None or self._authorship.writers is None:
            return None
        return self._authorship.writer_refusal(item.row, self.writers[item.saga_id])

    def seen(self, item: _Checked) -> None:
        """``item`` is already archived (a duplicate, or a message read again): the process has
        now read it from the topic too."""
        self._advance(item)

    def extended(self, item: _Checked) -> None:
        """``item`` extends the table's chain of its saga (it is archived by this batch)."""
        saga_id = item.saga_id
        if saga_id in self.writers and self._authorship is not None:
            self.writers[saga_id] = self._authorship.after(self.writers[saga_id], item.row)
        if self._advance(item) or saga_id in self.flagged:
            return
        base = self.bases[saga_id]
        self._flag(
            FindingReason.UNATTESTED,
            saga_id,
            f"seq {item.seq} extends the table's head, which this archiver neither read from "
            f"the topic nor verified under its signing key (it attested {describe(base)}): the "
            "saga is not signed past that",
            base,
            (item.seq - 1, item.prev_hash),
        )

    def _advance(self, item: _Checked) -> bool:
        base = self.bases[item.saga_id]
        if item.seq == base[0] + 1 and item.prev_hash == base[1]:
            self.bases[item.saga_id] = (item.seq, item.hash)
            return True
        return item.seq <= base[0]

    # --- after the commit ---------------------------------------------------------------------
    def record(self, ledger: IngestLedger, heads: Mapping[str, Head]) -> None:
        """Put what the batch attested into ``ledger`` (``heads``: the table's, as committed)."""
        for saga_id, (topic, partition) in self._places.items():
            ledger.put(
                saga_id,
                LedgerEntry(
                    attested=self.bases[saga_id],
                    signed=self.signed[saga_id],
                    table=heads.get(saga_id),
                    topic=topic,
                    partition=partition,
                    writers=self.writers.get(saga_id),
                    flagged=saga_id in self.flagged,
                ),
            )


def places_of(items: Sequence[tuple[str, str, int]]) -> dict[str, tuple[str, int]]:
    """Per saga, the (topic, partition) of its messages: ``items`` are (saga, topic, partition)."""
    return {saga_id: (topic, partition) for saga_id, topic, partition in items}
