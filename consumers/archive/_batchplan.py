"""One batch's view of its sagas beyond the table's heads: the head this process attested for
each (what it read from the topic), who may write each, and what it found the table to hold
that it did not write (docs/adr/0012-checkpoint-rounds.md, "The signer's input";
docs/adr/0014-signed-decisions-and-writers.md §5).

The batch classifies events against the table (the rows must stay consistent with it).  Beside
it, this plan walks each saga's events as the topic gives them, in offset order, with the
acceptance rule of docs/adr/0004 (the first event extending the attested head) and the writer
rule: an event the walk accepts advances the attested head only when the table holds it (it
was written now, or is found there); the table disagreeing with the walk stops the saga's
attestation and is reported.  Only attested heads reach the ledger, and so the signer.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sagacity.consumers.archive._findings import Finding, FindingReason, describe
from sagacity.consumers.archive._ledger import IngestLedger, LedgerEntry
from sagacity.consumers.archive._owners import writers_of, writers_up_to
from sagacity.entries._events import GENESIS_HASH
from sagacity.ports import IngestBatch
from sagacity.signing._writer_roles import SagaWriters

if TYPE_CHECKING:
    from sagacity.consumers.archive._attest import CheckpointVerifier
    from sagacity.consumers.archive._authorship import Authorship
    from sagacity.consumers.archive._rowcheck import _Checked

Head = tuple[int, str]
_GENESIS: Head = (0, GENESIS_HASH)


class Table(enum.Enum):
    """What the table holds at an event's seq once the batch classified it."""

    WRITTEN = "written"
    """This batch writes it."""
    HOLDS = "holds"
    """It is archived already, with this hash."""
    LACKS = "lacks"
    """Not this event (refused, or another one holds the seq)."""


class BatchPlan:
    """Per saga of a batch: its attested head, its writers, and the findings.

    Args:
        ledger: what this process attested before the batch.
        verifier: heads signed under the archive's own key, for sagas the ledger lacks.
        unit: the batch's transaction.
        heads: the table's head of each saga of the batch (absent: no row yet).
        places: each saga's (topic, partition), from its messages.
        authorship: with a writer registry, the writers of each saga are followed.
    """

    def __init__(
        self,
        *,
        ledger: IngestLedger,
        verifier: CheckpointVerifier,
        unit: IngestBatch,
        heads: Mapping[str, Head],
        places: Mapping[str, tuple[str, int]],
        authorship: Authorship | None,
    ) -> None:
        self._places = places
        self._roles = authorship if authorship is not None and authorship.writers else None
        self.findings: list[Finding] = []
        self.bases: dict[str, Head] = {}
        self.offsets: dict[str, int | None] = {}
        """The offset each attested head was read at."""
        self.signed: dict[str, int] = {}
        self.flagged: set[str] = set()
        """Sagas reported (a finding): nothing past their attested head is signed."""
        self.stopped: set[str] = set()
        """Sagas whose attestation stopped (reported or not yet)."""
        self.attested_writers: dict[str, SagaWriters] = {}
        """Who may write each saga, folded from its attested chain (with a registry)."""
        self.table_writers: dict[str, SagaWriters] = {}
        """Who may write each saga, folded from the table's chain (what a written row joins)."""
        unknown: list[str] = []
        for saga_id in places:
            table = heads.get(saga_id)
            entry = ledger.get(saga_id)
            if entry is None:
                if table is None:
                    self.bases[saga_id], self.signed[saga_id] = _GENESIS, 0
                    self.attested_writers[saga_id] = SagaWriters()
                else:
                    unknown.append(saga_id)
                continue
            self.bases[saga_id], self.signed[saga_id] = entry.attested, entry.signed
            self.offsets[saga_id] = entry.offset
            if entry.writers is not None:
                self.attested_writers[saga_id] = entry.writers
            if entry.flagged:
                self.flagged.add(saga_id)
            if entry.stopped or entry.flagged:
                self.stopped.add(saga_id)
            if not entry.flagged and entry.table != table:
                self._flag(
                    FindingReason.HEAD_MOVED,
                    saga_id,
                    f"the table's head is {describe(table)}, not {describe(entry.table)} as "
                    "this archiver left it: something else changed the table; nothing past "
                    f"{describe(entry.attested)} is signed",
                    entry.attested,
                    table,
                )
        self._resume(unit, verifier, unknown, heads)
        if self._roles is not None:
            # Where the table's head is the attested one, its writers are the attested ones.
            for saga_id in places:
                if saga_id not in self.stopped and self.bases[saga_id] == heads.get(
                    saga_id, _GENESIS
                ):
                    found = self.attested_writers.get(saga_id)
                    if found is not None:
                        self.table_writers[saga_id] = found
            rest = {s: heads[s] for s in places if s in heads and s not in self.table_writers}
            self.table_writers.update(writers_of(unit.events, rest))
            for saga_id in places:
                self.table_writers.setdefault(saga_id, SagaWriters())

    def _resume(
        self,
        unit: IngestBatch,
        verifier: CheckpointVerifier,
        unknown: list[str],
        heads: Mapping[str, Head],
    ) -> None:
        """Sagas this process has not read: from their last head signed under the archive's
        key (verified), else from the genesis hash."""
        signed = verifier.signed_heads(unit.round_log, unknown) if verifier else {}
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
        if self._roles is None:
            return
        at_base = {s: self.bases[s] for s in unknown if self.bases[s][0] > 0}
        folded = writers_up_to(unit.events, at_base)
        for saga_id in unknown:
            writers = folded.get(saga_id, SagaWriters())
            if writers is None:
                self._flag(
                    FindingReason.UNATTESTED,
                    saga_id,
                    f"its archived rows up to {describe(self.bases[saga_id])}, which this "
                    "archive signed, do not hash to it: they were changed",
                    self.bases[saga_id],
                    heads[saga_id],
                )
            else:
                self.attested_writers[saga_id] = writers

    def _flag(
        self,
        reason: FindingReason | None,
        saga_id: str,
        detail: str,
        ingested: Head | None,
        table: Head | None,
    ) -> None:
        """Stop attesting ``saga_id`` (nothing past its attested head is signed); report it
        unless ``reason`` is ``None`` (a signing pass reports it then)."""
        self.stopped.add(saga_id)
        if reason is not None:
            self.flagged.add(saga_id)
            self.findings.append(
                Finding(
                    reason=reason, saga_id=saga_id, detail=detail, ingested=ingested, table=table
                )
            )

    # --- the batch's events, in order ---------------------------------------------------------
    def writer_refusal(self, item: _Checked) -> tuple[str, str] | None:
        """Why ``item``'s writer may not write it onto the table's chain (``None``: it may)."""
        if self._roles is None:
            return None
        return self._roles.writer_refusal(item.row, self.table_writers[item.saga_id])

    def observe(self, item: _Checked, table: Table, *, again: bool) -> None:
        """Walk ``item`` (the topic's next message of its saga) beside the table's verdict.

        Args:
            table: what the table holds at its seq now.
            again: it was read again after a restart (nothing is written for it).
        """
        saga_id = item.saga_id
        if table is Table.WRITTEN and self._roles is not None:
            self.table_writers[saga_id] = self._roles.after(self.table_writers[saga_id], item.row)
        if saga_id in self.stopped:
            return
        base = self.bases[saga_id]
        extends = item.seq == base[0] + 1 and item.prev_hash == base[1]
        refused = None
        if extends and self._roles is not None:
            refused = self._roles.writer_refusal(item.row, self.attested_writers[saga_id])
        if extends and refused is None and table is not Table.LACKS:
            self.bases[saga_id] = (item.seq, item.hash)
            self.offsets[saga_id] = item.row[14]
            if self._roles is not None:
                writers = self.attested_writers[saga_id]
                self.attested_writers[saga_id] = self._roles.after(writers, item.row)
            return
        if extends and refused is None:
            # The topic's chain goes on with this event; the table holds another (or none).
            # Read again, it may be one quarantined by a rule that has changed since (its time
            # window, the registry): stop quietly; each signing pass reports unsigned heads.
            self._flag(
                None if again else FindingReason.HEAD_MOVED,
                saga_id,
                f"the table does not hold seq {item.seq} as read from the topic "
                f"({item.hash[:16]}…): nothing past {describe(base)} is signed",
                base,
                None,
            )
        elif extends and table is not Table.LACKS:
            assert refused is not None
            self._flag(
                FindingReason.UNATTESTED,
                saga_id,
                f"the table holds seq {item.seq}, which its writer may not write: "
                f"{refused[1]}; nothing past {describe(base)} is signed",
                base,
                (item.seq, item.hash),
            )
        elif table is Table.WRITTEN and item.seq > base[0]:
            self._flag(
                FindingReason.UNATTESTED,
                saga_id,
                f"seq {item.seq} extends the table's head, which this archiver neither read "
                f"from the topic nor verified under its signing key (it attested "
                f"{describe(base)}): the saga is not signed past that",
                base,
                (item.seq - 1, item.prev_hash),
            )

    # --- after the commit ---------------------------------------------------------------------
    def record(self, ledger: IngestLedger, heads: Mapping[str, Head]) -> None:
        """Put what the batch attested into ``ledger`` (``heads``: the table's, as committed)."""
        for saga_id, (topic, partition) in self._places.items():
            entry = ledger.get(saga_id)
            if entry is not None and entry.topic == topic and entry.partition == partition:
                entry.attested = self.bases[saga_id]
                entry.signed = self.signed[saga_id]
                entry.table = heads.get(saga_id)
                entry.offset = self.offsets.get(saga_id)
                entry.writers = self.attested_writers.get(saga_id)
                entry.flagged = saga_id in self.flagged
                entry.stopped = saga_id in self.stopped
                ledger.put(saga_id, entry)
                continue
            ledger.put(
                saga_id,
                LedgerEntry(
                    attested=self.bases[saga_id],
                    signed=self.signed[saga_id],
                    table=heads.get(saga_id),
                    topic=topic,
                    partition=partition,
                    offset=self.offsets.get(saga_id),
                    writers=self.attested_writers.get(saga_id),
                    flagged=saga_id in self.flagged,
                    stopped=saga_id in self.stopped,
                ),
            )
