"""What this archiver process ingested from the topic: the only input its signer signs.

A database writer can change every table, the heads included, so nothing read back from the
archive may be the input to a signature (docs/adr/0012-checkpoint-rounds.md, "The signer's
input").  The ledger is the archiver's own memory: per saga, the head it *attested* — reached
by reading the saga's events from Kafka in offset order, each extending the one before, from
the genesis hash or from a head its own key signed (verified, not trusted) — and the table's
head as this process last left it.  The signer signs the attested heads it has not signed yet,
nothing else.

Memory stays bounded: heads already signed are forgotten least recently used first (a later
event re-attests its saga from the signed checkpoint); heads not signed yet are kept until the
next signing round, which the service runs early when too many are waiting.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

from sagacity.signing._writer_roles import SagaWriters

Head = tuple[int, str]
"""A saga's (seq, hash)."""


@dataclass(slots=True, kw_only=True)
class LedgerEntry:
    """One saga as this process knows it.

    Attributes:
        attested: the head this process reached from the topic (or verified under its key).
        signed: the highest seq of ``attested``'s chain a round covers (signed here, or the
            verified checkpoint it was attested from).
        table: the table's head as this process's last commit left it.
        topic / partition: where the saga's events are read.
        offset: the offset the attested head was read at (``None``: not read by this process,
            but verified under the archive's key, or the genesis hash).
        writers: who may write the saga, folded from its chain up to ``table``.
        flagged: a finding was reported for it (the table holds what this process did not
            attest): reported once, and nothing past ``attested`` is signed.
        stopped: nothing past ``attested`` is attested (a finding may not be reported yet).
    """

    attested: Head
    signed: int
    table: Head | None
    topic: str
    partition: int
    offset: int | None = None
    writers: SagaWriters | None = None
    flagged: bool = False
    stopped: bool = False

    @property
    def pending(self) -> bool:
        """Its attested head is not signed yet."""
        return self.attested[0] > self.signed


class IngestLedger:
    """Per saga, the head this process attested from its own reading of the topic.

    Args:
        capacity: signed entries kept at most (least recently used forgotten first).
        signing: whether anything will sign the attested heads; without a signer nothing is
            kept waiting for one (memory stays bounded by ``capacity``).
    """

    def __init__(self, *, capacity: int = 200_000, signing: bool = True) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._signing = signing
        self._entries: OrderedDict[str, LedgerEntry] = OrderedDict()
        self._pending: set[str] = set()
        self._handled: dict[tuple[str, int], int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, saga_id: str) -> LedgerEntry | None:
        """The saga's entry, if this process holds one (marked recently used)."""
        entry = self._entries.get(saga_id)
        if entry is not None:
            self._entries.move_to_end(saga_id)
        return entry

    def put(self, saga_id: str, entry: LedgerEntry) -> None:
        """Record ``entry`` (after the transaction that wrote what it describes committed)."""
        if not self._signing:
            entry.signed = max(entry.signed, entry.attested[0])
        self._entries[saga_id] = entry
        self._entries.move_to_end(saga_id)
        if entry.pending:
            self._pending.add(saga_id)
        else:
            self._pending.discard(saga_id)
        self._evict()

    def handled(self, topic: str, partition: int, next_offset: int) -> None:
        """Every message of the partition below ``next_offset`` was handled and committed."""
        key = (topic, partition)
        if next_offset > self._handled.get(key, -1):
            self._handled[key] = next_offset

    @property
    def pending_count(self) -> int:
        """Sagas whose attested head is not signed yet."""
        return len(self._pending)

    def pending(self) -> list[tuple[str, int, str]]:
        """The attested heads not signed yet, ``(saga, seq, hash)`` in saga id byte order (the
        order of a round's leaves)."""
        out = []
        for saga_id in self._pending:
            entry = self._entries[saga_id]
            out.append((saga_id, *entry.attested))
        out.sort(key=lambda h: h[0].encode("utf-8", "surrogatepass"))
        return out

    def handled_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset below which every message was handled."""
        return dict(self._handled)

    def mark_signed(self, heads: Collection[tuple[str, int, str]]) -> None:
        """``heads`` (from :meth:`pending`) are covered by a committed round."""
        for saga_id, seq, _hash in heads:
            entry = self._entries.get(saga_id)
            if entry is None:
                continue
            entry.signed = max(entry.signed, seq)
            if not entry.pending:
                self._pending.discard(saga_id)
        self._evict()

    def forget(self, topic: str, partitions: Collection[int]) -> None:
        """Drop what this process knew of ``partitions`` (revoked: another member owns them
        now, and their heads move without this process)."""
        gone = set(partitions)
        for saga_id in [
            s for s, e in self._entries.items() if e.topic == topic and e.partition in gone
        ]:
            del self._entries[saga_id]
            self._pending.discard(saga_id)
        for key in [k for k in self._handled if k[0] == topic and k[1] in gone]:
            del self._handled[key]

    def _evict(self) -> None:
        """Forget the least recently used signed entries beyond the capacity (looking at a few
        of the oldest per call: pending ones stay until they are signed)."""
        excess = len(self._entries) - self._capacity
        if excess <= 0:
            return
        gone: list[str] = []
        for looked, saga_id in enumerate(self._entries):
            if len(gone) >= excess or looked >= excess + 64:
                break
            if saga_id not in self._pending:
                gone.append(saga_id)
        for saga_id in gone:
            del self._entries[saga_id]
