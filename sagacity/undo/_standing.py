"""Which ``COMPENSATION_REQUESTED`` of a saga stands: the one the compensation service acts on.

Any writer of the topic can append a linked request to any saga.  While the saga is live that
only hands it to compensation early (a stop, as a crash would).  After the saga ended
(``COMPLETED``, ``COMPENSATED``, ``COMPENSATION_FAILED``, ``REJECTED``, ``EXPIRED``) a request
would undo finished work, so it stands only when an operator signed it (``sagacity saga
compensate``, docs/adr/0027-operator-signatures.md), or when a person's settlement of a suspect
step (``SUSPECT_SETTLED`` that counts, docs/adr/0014) reopened the saga after its end.  After
an erasure that counts (an ``ERASED`` an operator signed: ``erasure_counts``) nothing stands:
the undo's arguments and every result it would journal are erased.  Any other request after an
end is refused, with its reason.  An ``ERASED`` that does not count changes nothing: it neither
ends a pending request nor keeps the next one from standing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.saga._result import SagaStatus
from sagacity.signing._operator_signature import OperatorVerifier, erasure_counts, operator_reason

FINAL = frozenset(s.value for s in SagaStatus if s is not SagaStatus.COMPENSATION_PENDING)
"""A ``SAGA_ENDED`` with one of these answers every request before it."""
TERMINAL = frozenset(
    {
        SagaStatus.COMPLETED.value,
        SagaStatus.COMPENSATED.value,
        SagaStatus.COMPENSATION_FAILED.value,
        SagaStatus.REJECTED.value,
        SagaStatus.EXPIRED.value,
    }
)
"""A ``SAGA_ENDED`` with one of these ends the saga: a later request needs an operator."""
SAGA_ERASED = "saga_erased"
"""Why a request after an erasure that counts is refused, signed or not (its dead-letter
reason)."""


@dataclass(frozen=True, kw_only=True)
class RefusedRequest:
    """A request after the saga's end that no operator signed.

    Attributes:
        request: the ``COMPENSATION_REQUESTED``.
        reason: why its operator signature does not count
            (``sagacity.signing._operator_signature``).
        detail: for the dead letter and the log: the end it follows and the reason.
    """

    request: JournalEntry
    reason: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class Standing:
    """The request a saga's chain leaves standing, and the requests it refused."""

    request: JournalEntry | None
    refused: tuple[RefusedRequest, ...] = ()

    def refusal_of(self, seq: int) -> RefusedRequest | None:
        """The refusal of the request at ``seq``, if it was refused."""
        return next((r for r in self.refused if r.request.seq == seq), None)


def standing(
    entries: Sequence[JournalEntry],
    *,
    operator: OperatorVerifier | None = None,
    settlement_counts: Callable[[JournalEntry], bool] | None = None,
    journal: str | None = None,
) -> Standing:
    """The saga's standing request: its last ``COMPENSATION_REQUESTED`` that no final
    ``SAGA_ENDED`` (nor an ``ERASED`` that counts) followed, counting one after an end only
    when signed by a pinned operator key (``operator``) or after a settlement that counts, and
    none after an erasure that counts.

    Args:
        operator: the pinned operator keys (``None``: no request after an end stands, and no
            ``ERASED`` counts).
        settlement_counts: whether a ``SUSPECT_SETTLED`` counts (``None``: none does).
        journal: this journal's identity: an operator's request or erasure signed for another
            journal does not count here.
    """
    request: JournalEntry | None = None
    ended: JournalEntry | None = None  # the end (or erasure) a later request must overcome
    erased: JournalEntry | None = None  # the erasure that counts: nothing overcomes it
    settled: set[tuple[int | None, str | None]] = set()
    uncounted: JournalEntry | None = None  # a settlement after the end that does not count
    refused: list[RefusedRequest] = []
    for entry in entries:
        kind = entry.event_type
        if kind is EventType.COMPENSATION_REQUESTED:
            if erased is not None:
                refused.append(_refusal(entry, erased, SAGA_ERASED, None))
                continue
            if ended is not None:
                why = operator_reason(entry, operator, journal=journal)
                if why is not None:
                    refused.append(_refusal(entry, ended, why, uncounted))
                    continue
            request, ended = entry, None
        elif kind is EventType.SUSPECT_SETTLED:
            step = (entry.ref_seq, entry.attributes.get(attr.PHASE))
            counts = settlement_counts is not None and settlement_counts(entry)
            # Only a step's first settlement reopens the saga: a copy appended later is not
            # a person's new word.
            if counts and step not in settled:
                settled.add(step)
                if ended is not None and ended.event_type is EventType.SAGA_ENDED:
                    ended = None
            elif ended is not None:
                uncounted = entry
        elif kind is EventType.ERASED:
            # Any writer can append one: only the operator's ends anything.
            if erasure_counts(entry, operator, journal=journal):
                request, ended, erased, uncounted = None, entry, entry, None
        elif kind is EventType.SAGA_ENDED and entry.result in FINAL:
            request, uncounted = None, None
            ended = entry if entry.result in TERMINAL else None
    return Standing(request=request, refused=tuple(refused))


def _refusal(
    request: JournalEntry, ended: JournalEntry, reason: str, uncounted: JournalEntry | None
) -> RefusedRequest:
    what = (
        f"was erased (seq {ended.seq})"
        if ended.event_type is EventType.ERASED
        else f"ended {ended.result} (seq {ended.seq})"
    )
    settlement = (
        ""
        if uncounted is None
        else (
            f"; the SUSPECT_SETTLED at seq {uncounted.seq} does not count (not verified "
            "against the pinned approvals key, or a step settled before)"
        )
    )
    why = (
        "its data (the undo's arguments, every result it would journal) is gone"
        if reason == SAGA_ERASED
        else f"would undo finished work and is not signed by a pinned operator key ({reason})"
    )
    return RefusedRequest(
        request=request,
        reason=reason,
        detail=(
            f"saga {request.saga_id!r} {what}: its COMPENSATION_REQUESTED at seq {request.seq} "
            f"(actor {request.actor!r}) {why}{settlement}; it is not acted on"
        ),
    )


def pending_request(
    entries: Sequence[JournalEntry],
    *,
    operator: OperatorVerifier | None = None,
    journal: str | None = None,
) -> JournalEntry | None:
    """The saga's last ``COMPENSATION_REQUESTED`` if no final ``SAGA_ENDED`` followed it, nor
    an ``ERASED`` that counts (an erased saga is never acted on: its final status may be
    erased too); without the operator's keys, a request after the saga's end does not stand
    and no ``ERASED`` counts."""
    return standing(entries, operator=operator, journal=journal).request
