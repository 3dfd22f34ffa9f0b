"""A person's word on a suspect step: what settling a ``SUSPECT`` means on the chain.

A ``SUSPECT`` marks a call whose outcome nobody knows: an ``INTENT`` without an outcome (phase
``call``) or a ``COMPENSATION_INTENT`` without one whose undo is not idempotent (phase
``compensation``).  The compensation runner never acts on it blindly; a person finds out and
settles it with ``SUSPECT_SETTLED`` (actor = that person, ``ref_seq`` = the step, ``outcome`` and
``note``).  The outcome always answers one question, "did the call in doubt take effect?":

============== ==================================== =======================================
outcome        phase ``call`` (the tool call)       phase ``compensation`` (the undo)
============== ==================================== =======================================
executed       the effect exists: undo it, once     the undo took effect: the step is undone
not-executed   nothing happened: nothing to undo    it did not: the undo is called again
fixed-by-hand  a person repaired it: recorded       a person repaired it: recorded
============== ==================================== =======================================

Then the saga is compensated again from its chain (delegated: ``COMPENSATION_REQUESTED`` for
the compensation service), so its end follows: ``COMPENSATED`` once nothing is dirty.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalNotFound,
    DecisionInProgressError,
    InvalidArgumentError,
    TailMovedError,
)
from sagacity.saga._result import SagaResult, SagaStatus

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity

PHASE_CALL = "call"
PHASE_COMPENSATION = "compensation"

MAX_NOTE_CHARS = 4096
"""A settlement's note is for people; longer text belongs in a ticket it links to."""

_ATTEMPTS = 5


class SettlementOutcome(enum.StrEnum):
    """What the person found out about the call in doubt."""

    EXECUTED = "executed"
    NOT_EXECUTED = "not-executed"
    FIXED_BY_HAND = "fixed-by-hand"


@dataclass(frozen=True, kw_only=True)
class SuspectStep:
    """A step some ``SUSPECT`` entry put in doubt, and how (if) it was settled.

    Attributes:
        saga_id / seq / tool: the step (``seq`` = the ``INTENT`` for phase ``call``, the
            ``EXECUTED`` for phase ``compensation``).
        phase: ``call`` or ``compensation``.
        suspect: the ``SUSPECT`` entry.
        settlement: the ``SUSPECT_SETTLED`` entry, ``None`` while open.
    """

    saga_id: str
    seq: int
    tool: str | None
    phase: str
    suspect: JournalEntry
    settlement: JournalEntry | None = None

    @property
    def outcome(self) -> SettlementOutcome | None:
        """The settled outcome (``None`` while open or unreadable)."""
        if self.settlement is None:
            return None
        try:
            return SettlementOutcome(self.settlement.attributes.get(attr.OUTCOME, ""))
        except ValueError:
            return None

    def describe_settlement(self) -> str:
        """Who settled it, when and how (for refusals and pages)."""
        entry = self.settlement
        if entry is None:
            return "not settled"
        outcome = entry.attributes.get(attr.OUTCOME, "?")
        return f"settled {outcome} by {entry.actor} at seq {entry.seq} (t={entry.recorded_at_us})"


def suspect_steps(entries: Sequence[JournalEntry]) -> list[SuspectStep]:
    """Every step put in doubt on the chain, in step order, each with its latest settlement.

    A settlement answers the ``SUSPECT`` before it; a step suspected again after it (an undo
    called again and interrupted again) is open again.
    """
    steps: dict[tuple[int, str], SuspectStep] = {}
    for entry in entries:
        ref = entry.ref_seq
        if ref is None:
            continue
        phase = entry.attributes.get(attr.PHASE, PHASE_CALL)
        if entry.event_type is EventType.SUSPECT:
            steps[(ref, phase)] = SuspectStep(
                saga_id=entry.saga_id, seq=ref, tool=entry.tool, phase=phase, suspect=entry
            )
        elif entry.event_type is EventType.SUSPECT_SETTLED and (ref, phase) in steps:
            step = steps[(ref, phase)]
            steps[(ref, phase)] = SuspectStep(
                saga_id=step.saga_id,
                seq=step.seq,
                tool=step.tool,
                phase=step.phase,
                suspect=step.suspect,
                settlement=entry,
            )
    return [steps[key] for key in sorted(steps)]


def open_suspects(entries: Sequence[JournalEntry]) -> list[SuspectStep]:
    """The suspect steps nobody has settled yet."""
    return [step for step in suspect_steps(entries) if step.settlement is None]


def settlement_of(entries: Sequence[JournalEntry], seq: int, phase: str) -> JournalEntry | None:
    """The ``SUSPECT_SETTLED`` answering the step's last ``SUSPECT`` of ``phase``, if any."""
    for step in suspect_steps(entries):
        if step.seq == seq and step.phase == phase:
            return step.settlement
    return None


def _check_outcome(outcome: object) -> SettlementOutcome:
    try:
        return SettlementOutcome(outcome)  # type: ignore[arg-type]
    except ValueError:
        choices = ", ".join(o.value for o in SettlementOutcome)
        raise InvalidArgumentError(f"outcome must be one of {choices}, got {outcome!r}") from None


def _check_text(name: str, value: object, *, required: bool) -> str:
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidArgumentError(f"{name} must be a non-empty str, got {value!r}")
    if len(value) > MAX_NOTE_CHARS:
        raise InvalidArgumentError(f"{name} is longer than {MAX_NOTE_CHARS} characters")
    return value


class SuspectDesk:
    """Settles suspect steps for one :class:`~sagacity.Sagacity`."""

    def __init__(self, sagacity: Sagacity) -> None:
        self._s = sagacity

    def settle(
        self, saga_id: str, seq: int, outcome: object, person: object, *, note: object
    ) -> SagaResult:
        """See :meth:`Sagacity.settle`."""
        chosen = _check_outcome(outcome)
        who = _check_text("the person settling", person, required=True)
        text = _check_text("note", note, required=True)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise InvalidArgumentError(f"seq must be an int >= 1, got {seq!r}")
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return self._settle(saga_id, seq, chosen, who, text)
            except TailMovedError:
                if attempt == _ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _settle(
        self, saga_id: str, seq: int, outcome: SettlementOutcome, person: str, note: str
    ) -> SagaResult:
        from sagacity.gate._approval import load_chain
        from sagacity.saga._outcome import outcome_from_chain

        entries = load_chain(self._s.journal, saga_id)
        # A settlement that does not count (not the approvals service's word) settles nothing.
        counts = self._s._desk.settlement_counts
        counted = [e for e in entries if e.event_type is not EventType.SUSPECT_SETTLED or counts(e)]
        steps = [step for step in suspect_steps(counted) if step.seq == seq]
        if not steps:
            raise ApprovalNotFound(
                f"saga {saga_id!r} has no suspect step at seq {seq}", saga_id=saga_id, seq=seq
            )
        open_steps = [step for step in steps if step.settlement is None]
        if not open_steps:
            raise AlreadyDecidedError(
                f"cannot settle: the step was already {steps[-1].describe_settlement()}",
                saga_id=saga_id,
                seq=seq,
            )
        ended = outcome_from_chain(entries)
        if ended is None or ended.status is SagaStatus.COMPENSATION_PENDING:
            raise DecisionInProgressError(
                f"saga {saga_id!r} is being compensated right now; settle the step once its "
                "run has ended",
                saga_id=saga_id,
                seq=seq,
            )
        step = open_steps[-1]
        draft = EntryDraft(
            saga_id=saga_id,
            event_type=EventType.SUSPECT_SETTLED,
            tool=step.tool,
            actor=person,
            attributes={
                attr.REF_SEQ: str(seq),
                attr.PHASE: step.phase,
                attr.OUTCOME: outcome.value,
                attr.NOTE: note,
                # What was settled, on which journal (the signature binds both).
                attr.REQUEST_HASH: next(e.hash for e in entries if e.seq == seq),
                attr.JOURNAL: self._s.journal_identity,
            },
            recorded_at_us=self._s.now_us(),
        )
        signer = self._s.decision_signer
        if signer is not None:
            draft = signer.sign(draft)  # a decision like any other (docs/adr/0014)
        # The gate's own decision append (compare-and-append onto the chain the checks read),
        # so a settlement is journaled exactly as an APPROVED or REJECTED is.
        self._s._desk.append_decision(draft, entries[-1].seq)
        error = f"seq {seq} {step.tool}: settled {outcome.value} by {person}: {note}"
        if self._s.compensation_mode == "delegated":
            return self._s.end_saga(
                saga_id,
                cause=EventType.SUSPECT_SETTLED,
                ref_seq=seq,
                error=error,
                clean_status=SagaStatus.COMPENSATED,
                report=None,
            )
        return self._s.compensate(saga_id, reason=EventType.SUSPECT_SETTLED, error=error)
