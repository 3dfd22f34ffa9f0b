"""What an archive audit finds: one saga's audit, the retention records', and a run's totals.

The vocabulary of a finding is :class:`~sagacity.consumers.archive._reasons.AuditReason`;
the rule that gives each finding is :mod:`~sagacity.consumers.archive._judging`'s, and the
run over the archive that collects them :mod:`~sagacity.consumers.archive._audit`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._roundaudit import RoundAudit
from sagacity.consumers.archive._story import SagaStory


@dataclass(frozen=True, kw_only=True)
class SagaAudit:
    """The audit of one saga."""

    saga_id: str
    ok: bool
    events: int
    head_seq: int
    head_hash: str
    checkpoints: int = 0
    bad_seq: int | None = None
    reason: AuditReason | None = None
    detail: str | None = None
    signed_seq: int = 0
    """The highest seq a verified checkpoint covers (0: none)."""
    unsigned: int = 0
    """How many of the saga's newest archived events no checkpoint covers (0 for a saga that
    failed: its coverage means nothing)."""
    writer: str | None = None
    """For a finding on what the chain says (``grammar:*``): the ``writer`` attribute of the
    offending event, when it names one."""
    story: SagaStory | None = field(default=None, compare=False, repr=False)
    """What the saga's chain says (:mod:`~sagacity.consumers.archive._story`), for a saga
    whose chain, checkpoints and head passed and whose story fails it or counts an erasure
    (``None`` otherwise)."""


@dataclass(kw_only=True)
class RetentionAudit:
    """The signed retention records an audit checked (docs/adr/0015-round-log.md), and the
    findings of those that failed, by partition name: every anchor of a failed record fails
    its saga (``forged_anchor``)."""

    records: int = 0
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class AuditSummary:
    """Totals over an audit run.  ``rounds.failed`` may name a round no saga's checkpoint
    points at any more (all its rows deleted): the run failed then too (:attr:`all_ok`)."""

    sagas: int = 0
    ok: int = 0
    events: int = 0
    checkpoints: int = 0
    by_reason: dict[AuditReason, int] = field(default_factory=dict)
    failures: list[SagaAudit] = field(default_factory=list)
    rounds: RoundAudit = field(default_factory=RoundAudit)
    retention: RetentionAudit = field(default_factory=RetentionAudit)
    seconds: float = 0.0
    unsigned_sagas: int = 0
    """Sagas with archived events and no checkpoint at all."""
    unsigned_tails: int = 0
    """Sagas with checkpoints whose newest events no checkpoint covers."""
    unsigned_events: int = 0
    """Events of those sagas no checkpoint covers."""
    unsigned: list[SagaAudit] = field(default_factory=list)
    """The first of the sagas that passed with events no checkpoint covers (as many as
    failures are kept)."""
    pinned: bool = False
    """The keys were pinned by the auditor: then nothing signed is a failure
    (:attr:`nothing_signed`), since a pinned key asserts there is signed evidence."""
    erased_sagas: set[str] = field(default_factory=set)
    """Sagas whose accepted chain counts an erasure (an ``ERASED`` event)."""
    erased_fields: int = 0
    """The data fields those erasures list."""
    erasures_unverified: int = 0
    """Erasures counted without an operator key to verify their signature (none was pinned:
    docs/adr/0027-operator-signatures.md)."""

    @property
    def nothing_signed(self) -> bool:
        """Keys were pinned but no checkpoint verified under them."""
        return self.pinned and self.checkpoints == 0

    @property
    def all_ok(self) -> bool:
        """Every saga, every signing round and every retention record verified, and with
        pinned keys something was signed by them."""
        return (
            self.ok == self.sagas
            and not self.rounds.failed
            and not self.retention.failed
            and not self.nothing_signed
        )

    def add(self, audit: SagaAudit, *, keep_failures: int = 100) -> None:
        """Count one saga's audit."""
        self.sagas += 1
        self.events += audit.events
        if audit.story is not None and audit.story.erased:
            self.erased_sagas.add(audit.saga_id)
            self.erased_fields += audit.story.data.erased_fields
            self.erasures_unverified += audit.story.data.unverified
        self.checkpoints += audit.checkpoints
        if audit.unsigned:
            self.unsigned_events += audit.unsigned
            if audit.signed_seq:
                self.unsigned_tails += 1
            else:
                self.unsigned_sagas += 1
            if audit.ok and len(self.unsigned) < keep_failures:
                self.unsigned.append(audit)
        if audit.ok:
            self.ok += 1
        else:
            assert audit.reason is not None
            self.by_reason[audit.reason] = self.by_reason.get(audit.reason, 0) + 1
            if len(self.failures) < keep_failures:
                self.failures.append(audit)


def unsigned_as_failure(audit: SagaAudit) -> SagaAudit:
    """``audit`` failed (``unsigned``) when it passed but no checkpoint covers its newest
    events; any other audit unchanged."""
    if not audit.ok or not audit.unsigned:
        return audit
    first = audit.head_seq - audit.unsigned + 1
    what = (
        f"seqs {first}..{audit.head_seq} follow the last checkpoint (seq {audit.signed_seq})"
        if audit.signed_seq
        else f"no checkpoint covers any of seqs {first}..{audit.head_seq}"
    )
    return dataclasses.replace(
        audit, ok=False, bad_seq=first, reason=AuditReason.UNSIGNED, detail=what
    )
