"""What undoing a saga would do, step by step, before anyone asks for it.

"Undo this saga" (the console, ``sagacity saga undo``, the MCP tool ``undo_saga``) and a
person about to approve a request want to know which earlier steps an undo could reverse and
which it could not.  The answer is the compensation runner's own plan (``plan`` journals
nothing) from the reader's declarations of the tools (docs/adr/0027-operator-signatures.md:
the undo comes from the declarations, never from what the journal's attributes claim).  A
reader without the declarations (a command line without ``--tools``) can only repeat what the
journal says, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.entries._memory import InMemoryJournal
from sagacity.tools._registry import ToolRegistry
from sagacity.tools._reversibility import Reversibility
from sagacity.undo._compensation import CompensationCall, CompensationRunner


@dataclass(frozen=True, kw_only=True, slots=True)
class PreviewStep:
    """One step of the saga and what an undo would do with it.

    Attributes:
        seq: the step (its ``EXECUTED``, or an ``INTENT`` in doubt).
        tool: its tool.
        reversible: an undo would reverse it.
        how: the undo that would be called, or why none would.
    """

    seq: int
    tool: str | None
    reversible: bool
    how: str

    def line(self) -> str:
        """One line for a person."""
        mark = "undo" if self.reversible else "KEEP"
        return f"{mark}  seq {self.seq} {self.tool}: {self.how}"


@dataclass(frozen=True, kw_only=True)
class UndoPreview:
    """Every step an undo of the saga would meet, newest first.

    Attributes:
        steps: the steps (the reads and the steps undone already are left out).
        declared: the answer comes from the reader's declarations (``False``: from the
            journal's word, which the compensation service does not take).
        undone: seqs of the steps undone already.
    """

    steps: tuple[PreviewStep, ...]
    declared: bool
    undone: tuple[int, ...] = ()

    @property
    def reversible(self) -> tuple[PreviewStep, ...]:
        """The steps an undo could reverse."""
        return tuple(s for s in self.steps if s.reversible)

    @property
    def kept(self) -> tuple[PreviewStep, ...]:
        """The steps an undo could not reverse (they stay as they are)."""
        return tuple(s for s in self.steps if not s.reversible)

    def warning(self) -> str | None:
        """The sentence a person reads before asking for the undo (``None``: all reversible)."""
        if not self.kept:
            return None
        listed = "; ".join(f"seq {s.seq} {s.tool} ({s.how})" for s in self.kept)
        return f"an undo cannot reverse {len(self.kept)} step(s): {listed}"


def preview_undo(entries: Sequence[JournalEntry], registry: ToolRegistry | None) -> UndoPreview:
    """What an undo of the saga whose chain is ``entries`` would do, by ``registry``'s
    declarations (``None``: by what the journal says, for a reader without them)."""
    undone = tuple(
        e.ref_seq
        for e in entries
        if e.event_type is EventType.COMPENSATED and e.ref_seq is not None
    )
    if registry is None:
        return UndoPreview(steps=_journal_word(entries, set(undone)), declared=False, undone=undone)
    steps: list[PreviewStep] = []
    for action in CompensationRunner(InMemoryJournal(), registry).plan(entries):
        if isinstance(action, CompensationCall):
            steps.append(
                PreviewStep(
                    seq=action.seq,
                    tool=action.step.tool,
                    reversible=True,
                    how=f"undone by {action.target}",
                )
            )
            continue
        step = action.dirty or action.suspect
        if step is None:
            continue
        how = step.reason if action.dirty else f"in doubt: {step.reason}"
        steps.append(PreviewStep(seq=step.seq, tool=step.tool, reversible=False, how=how))
    return UndoPreview(steps=tuple(steps), declared=True, undone=undone)


def _journal_word(entries: Sequence[JournalEntry], undone: set[int]) -> tuple[PreviewStep, ...]:
    steps: list[PreviewStep] = []
    for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
        if entry.event_type is not EventType.EXECUTED or entry.seq in undone:
            continue
        said = entry.attributes.get(attr.REVERSIBILITY, "")
        if said == Reversibility.READ.value:
            continue
        if said in (Reversibility.IRREVERSIBLE.value, Reversibility.PRIVILEGED.value):
            how, reversible = f"{said}: no undo exists (as journaled)", False
        elif entry.attributes.get(attr.UNDO) == "none":
            how, reversible = "the tool reported that no undo exists (as journaled)", False
        else:
            how, reversible = "undone if the compensation service declares an undo for it", True
        steps.append(PreviewStep(seq=entry.seq, tool=entry.tool, reversible=reversible, how=how))
    return tuple(steps)
