"""What ingest reads and reports: a message as read from Kafka, why one was refused, and what a
batch did (:mod:`._ingest` archives)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from sagacity.chain import BreakReason
from sagacity.chain._acceptance import ForkKind


class QuarantineReason(enum.StrEnum):
    """Why an event was refused on ingest (``archive_quarantine.reason``).

    A chain's words are the chain's (:class:`sagacity.chain.BreakReason` for a break of the
    link, the acceptance rule's :class:`~sagacity.chain._acceptance.ForkKind` for an event the
    chain refuses), taken from there: one vocabulary for every walker."""

    UNDECODABLE = "undecodable"
    """The bytes are not a journal event (or not a valid one)."""
    FORK = ForkKind.FORK.value
    """Another event already holds this seq in the saga's archived chain."""
    GAP = BreakReason.GAP.value
    """The event's seq is beyond the saga's archived head plus one."""
    WRONG_GENESIS = BreakReason.WRONG_GENESIS.value
    """A first event whose previous hash is not the genesis hash."""
    BROKEN_LINK = BreakReason.BROKEN_LINK.value
    """The previous hash is not the archived head's hash."""
    EDITED = BreakReason.EDITED.value
    """The content does not hash to the event's recorded hash."""
    BAD_TIME = "bad_time"
    """The event time is outside what the archive can partition (before 1970, after 9999)."""
    FOREIGN = ForkKind.FOREIGN.value
    """The message's key is not the saga its body names (no reader of either saga accepts it)."""
    AUTHENTICATION_FAILED = "authentication failed"
    """A sealed data field does not authenticate under its saga's data key: altered, or moved
    to another saga, seq or field (docs/adr/0019-erasure.md §3)."""
    DATA_KEY_NOT_FOUND = "data key not found"
    """A sealed event of a saga with no data key in the key store (sealed against another)."""
    KEK_NOT_HELD = "key-encryption key not held"
    """A sealed event of a saga whose data key is wrapped under a key-encryption key this
    archive does not hold."""
    UNSIGNED_DECISION = "unsigned_decision"
    """An ``APPROVED`` without the approvals service's signature (a pinned key is set)."""
    BAD_DECISION_SIGNATURE = "bad_decision_signature"
    """A decision whose signature does not verify against the pinned approvals key."""
    UNKNOWN_DECISION_KEY = "unknown_decision_key"
    """A decision signed by a key that is not pinned."""
    MALFORMED_DECISION_SIGNATURE = "malformed_decision_signature"
    """A decision whose signature attribute (or request reference) cannot be read."""
    UNSIGNED_GRANT = "unsigned_grant"
    """A ``GRANTED`` without the approvals service's ``grant_signature`` (a pinned key is set;
    docs/operations/grants.md)."""
    BAD_GRANT_SIGNATURE = "bad_grant_signature"
    """A grant (or a signed revocation) whose signature does not verify: altered, or moved
    from another saga."""
    UNKNOWN_GRANT_KEY = "unknown_grant_key"
    """A grant signed by a key that is not pinned."""
    MALFORMED_GRANT_SIGNATURE = "malformed_grant_signature"
    """A grant whose signature attribute (or an integer it signs) cannot be read."""
    UNREGISTERED_WRITER = "unregistered_writer"
    """The event's writer is not in the writer registry (per-writer signing is on)."""
    UNSIGNED_WRITER = "unsigned_writer"
    """A registered writer's event without its signature header."""
    BAD_WRITER_SIGNATURE = "bad_writer_signature"
    """The writer's signature does not verify."""
    WRITER_NOT_OWNER = ForkKind.WRITER_NOT_OWNER.value
    """A registered writer wrote an event it may not write in that saga: not its owner, and
    not a service role registered for that event (docs/adr/0014 §5)."""
    WRONG_PARTITION = ForkKind.WRONG_PARTITION.value
    """The message is not on the partition its key belongs on: no reader of the saga sees it
    (:meth:`sagacity.ports.Partitioner.misplaced`)."""
    PARTITION_UNAVAILABLE = "partition_unavailable"
    """The database refused to make the partition of the event's month (out of shared
    memory, a limit …): the event is kept here instead of stopping the archive."""
    TIME_OUT_OF_RANGE = "time_out_of_range"
    """The event time is outside the archive's time window around its clock: no partition is
    made for it (docs/adr/0006, "Partitioning")."""


@dataclass(frozen=True, kw_only=True)
class RawEvent:
    """A message as read from Kafka, before decoding."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] | None = None
    """The message's headers, when the archiver checks writers' signatures."""


@dataclass(kw_only=True)
class BatchReport:
    """What one archived batch did."""

    archived: int = 0
    duplicates: int = 0
    quarantined: dict[QuarantineReason, int] = field(default_factory=dict)
    attempts: int = 1
    seconds: float = 0.0
    """Wall time of the whole batch."""
    check_seconds: float = 0.0
    """Of which decoding and hashing (before the transaction)."""
    again: int = 0
    """Messages read again after a restart to re-verify what was archived but not signed."""
    findings: dict[str, int] = field(default_factory=dict)
    """Findings reported (``archive_finding``), by reason."""

    @property
    def quarantined_total(self) -> int:
        """Events quarantined, whatever the reason."""
        return sum(self.quarantined.values())


@dataclass(frozen=True)
class Refusal:
    """A message refused on ingest: its reason and detail, and the saga and seq when known."""

    reason: QuarantineReason
    detail: str
    event: RawEvent
    saga_id: str | None = None
    seq: int | None = None
