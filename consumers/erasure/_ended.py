"""What may follow a saga's end, as ``sagacity erase`` judges it: a forged event must not keep
a real erasure refused (docs/adr/0027-operator-signatures.md, "What a forger can still do").

Any writer of the topic can append a linked event to any saga.  Once a saga ended (a
``SAGA_ENDED`` saying ``COMPLETED``, ``COMPENSATED``, ``COMPENSATION_FAILED``, ``REJECTED`` or
``EXPIRED``), nothing appended after it starts any work unless a person's word reopens the
saga: a ``COMPENSATION_REQUESTED`` signed by a pinned operator key for this journal (``sagacity
saga compensate``; the compensation service acts on no other, ``_standing.py``), or a
settlement of a suspect step (``SUSPECT_SETTLED``) that counts.  Everything else after the end
— an unsigned request, a ``SAGA_OPENED`` with no such word before it, a call, a decision, a
request for approval (the saga grammar rules most of them out, ``grammar:after_end``) — is
*ignored*: it does not make the saga live again, so ``erase`` judges the saga without it and
names it.  After an ``ERASED`` that counts nothing reopens the saga (the compensation service
acts on nothing after it).  ``ERASED`` events are judged apart (counted or ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sagacity.entries._events import EventType, JournalEntry
from sagacity.signing._operator_signature import OperatorVerifier, erasure_counts, operator_reason
from sagacity.undo._standing import TERMINAL


@dataclass(frozen=True, kw_only=True)
class AfterEnd:
    """A saga's chain split as ``erase`` judges it.

    Attributes:
        kept: the events its liveness is judged by (the chain less :attr:`ignored`).
        ignored: events appended after an end that nothing reopened the saga for.
    """

    kept: list[JournalEntry] = field(default_factory=list)
    ignored: list[JournalEntry] = field(default_factory=list)


def after_end(
    entries: Sequence[JournalEntry],
    *,
    operator: OperatorVerifier | None,
    journal: str | None = None,
    settlement_counts: Callable[[JournalEntry], bool] = lambda entry: True,
    status_erased: bool = False,
) -> AfterEnd:
    """Split ``entries`` into what ``erase`` judges the saga by and what it ignores.

    Args:
        operator: the pinned operator keys a reopening request must be signed with.
        journal: this journal's identity (a request signed for another does not reopen).
        settlement_counts: whether a ``SUSPECT_SETTLED`` is a person's word (default: every
            one, when the approvals key is not pinned where ``erase`` runs).
        status_erased: the saga's data key is destroyed already (an erasure began): a
            ``SAGA_ENDED`` whose status is only a commitment is taken as the end it was when
            that erasure judged the saga ended.
    """
    out = AfterEnd()
    ended = erased = False
    for entry in entries:
        kind = entry.event_type
        if not ended:
            out.kept.append(entry)
            ended = kind is EventType.SAGA_ENDED and (
                entry.result in TERMINAL
                or (status_erased and entry.result is None and "result" in entry.commitments)
            )
            continue
        if kind is EventType.ERASED:
            out.kept.append(entry)
            erased = erased or erasure_counts(entry, operator, journal=journal)
            continue
        if not erased and _reopens(entry, operator, journal, settlement_counts):
            out.kept.append(entry)
            ended = False
            continue
        if kind is EventType.SAGA_ENDED and entry.result in TERMINAL:
            out.kept.append(entry)  # another end changes nothing
            continue
        out.ignored.append(entry)
    return out


def _reopens(
    entry: JournalEntry,
    operator: OperatorVerifier | None,
    journal: str | None,
    settlement_counts: Callable[[JournalEntry], bool],
) -> bool:
    """Whether a person's word in ``entry`` reopens an ended saga."""
    if entry.event_type is EventType.COMPENSATION_REQUESTED:
        return operator_reason(entry, operator, journal=journal) is None
    if entry.event_type is EventType.SUSPECT_SETTLED:
        return settlement_counts(entry)
    return False
