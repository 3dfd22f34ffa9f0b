"""Who may write which event of a saga: its owner, or a service writer registered for it.

The writer registry (docs/adr/0014-signed-decisions-and-writers.md §4) proves which key wrote an
event; this module says whether that writer may write it there (§5).  A saga belongs to its
*opener* (the writer of its first accepted ``SAGA_OPENED``) and, while one holds it, to its
*live* writer (docs/adr/0004-single-writer.md, ownership on the chain).  Anyone else is refused
unless the registry gives it a service role whose events these are:

=============  ======================================================================
role           events it may write in a saga it does not hold
=============  ======================================================================
``agent``      none (the default: an agent writes its own sagas only)
``approvals``  the decisions ``APPROVED``, ``REJECTED``, ``EXPIRED``,
               ``SUSPECT_SETTLED``; its resumes (``INTENT``, ``EXECUTED``, ``FAILED``,
               ``SUSPECT``, ``RESUME_REFUSED``) and the hand-off and end after a decision
               (``COMPENSATION_REQUESTED``, ``SAGA_ENDED``); ``APPROVAL_ESCALATED``;
               standing grants (``GRANTED``, ``GRANT_REVOKED``)
``compensation`` once the saga was handed to compensation: ``SAGA_OPENED`` (it then holds
               the saga) and ``COMPENSATION_INTENT``, ``COMPENSATED``,
               ``COMPENSATION_FAILED``, ``SUSPECT``, ``SAGA_ENDED``
``operator``   ``ERASED``; ``COMPENSATION_REQUESTED`` (a takeover, docs/adr/0011, even
               while another writer holds the saga); ``DEADLINE_EXTENDED``
=============  ======================================================================

``APPROVED``, ``SUSPECT_SETTLED``, ``GRANTED`` and ``GRANT_REVOKED`` (they let work proceed,
or govern what may) are written by the ``approvals`` role only, and ``ERASED`` by the
``operator`` role only, whoever holds the saga.  An opener whose saga was taken over is its
owner no more.

Everything here is pure: :func:`writer_refusal` is the one rule, called by the archive on
ingest and by every reader that accepts events from a registry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType

WRITER_NOT_OWNER = "writer_not_owner"
"""The reason an event is refused when its writer may not write it in that saga."""

HANDOFF_TAKEOVER = "takeover"
"""The ``handoff`` attribute of a ``COMPENSATION_REQUESTED`` that took a saga from its writer
(docs/adr/0011-writer-lease.md)."""

HANDOFF_EVENTS = frozenset(
    {
        EventType.AWAITING_APPROVAL,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.COMPENSATION_REQUESTED,
        EventType.SAGA_ENDED,
    }
)
"""Events after which the writer that opened the saga no longer holds it (ADR 0004)."""


class WriterRole(enum.StrEnum):
    """What a registered writer is, beyond the sagas it opens (``role`` in the registry)."""

    AGENT = "agent"
    APPROVALS = "approvals"
    COMPENSATION = "compensation"
    OPERATOR = "operator"


_E = EventType
ROLE_EVENTS: Mapping[WriterRole, frozenset[str]] = {
    WriterRole.AGENT: frozenset(),
    WriterRole.APPROVALS: frozenset(
        {
            _E.APPROVED,
            _E.REJECTED,
            _E.EXPIRED,
            _E.SUSPECT_SETTLED,
            _E.INTENT,
            _E.EXECUTED,
            _E.FAILED,
            _E.SUSPECT,
            _E.RESUME_REFUSED,
            _E.COMPENSATION_REQUESTED,
            _E.SAGA_ENDED,
            _E.APPROVAL_ESCALATED,
            _E.GRANTED,
            _E.GRANT_REVOKED,
        }
    ),
    WriterRole.COMPENSATION: frozenset(
        {
            _E.SAGA_OPENED,
            _E.COMPENSATION_INTENT,
            _E.COMPENSATED,
            _E.COMPENSATION_FAILED,
            _E.SUSPECT,
            _E.SAGA_ENDED,
        }
    ),
    WriterRole.OPERATOR: frozenset({_E.ERASED, _E.COMPENSATION_REQUESTED, _E.DEADLINE_EXTENDED}),
}
"""The events each role may write in a saga it neither opened nor holds."""

SERVICE_ONLY: Mapping[str, WriterRole] = {
    _E.APPROVED: WriterRole.APPROVALS,
    _E.SUSPECT_SETTLED: WriterRole.APPROVALS,
    _E.GRANTED: WriterRole.APPROVALS,
    _E.GRANT_REVOKED: WriterRole.APPROVALS,
    _E.ERASED: WriterRole.OPERATOR,
}
"""Events only one role writes, in any saga (its owner's included)."""


class WrittenEvent(Protocol):
    """What the rule reads of an event (a :class:`~sagacity.JournalEntry` or a draft)."""

    @property
    def event_type(self) -> str:
        """The type's name (an :class:`EventType` is a ``str``)."""
        ...

    @property
    def actor(self) -> str | None:
        """Who the event names as acting."""
        ...

    @property
    def attributes(self) -> Mapping[str, str]:
        """The event's attributes (``writer``, ``handoff`` …)."""
        ...


def writer_of(event: WrittenEvent) -> str | None:
    """The writer that produced ``event``: its ``writer`` attribute (hashed into the chain and,
    with the registry, signed); for a ``SAGA_OPENED`` without one (written before writers were
    named), its actor, which ADR 0004 makes the writer id."""
    writer = event.attributes.get(attr.WRITER)
    if writer is None and event.event_type == _E.SAGA_OPENED:
        return event.actor
    return writer


@dataclass(frozen=True, kw_only=True, slots=True)
class SagaWriters:
    """Who may write a saga, folded from its accepted chain (:meth:`of`, :meth:`after`).

    Attributes:
        opener: the writer of its first accepted ``SAGA_OPENED`` (its owner).
        live: the writer holding it now (the last ``SAGA_OPENED`` not handed off since).
        to_compensation: a ``COMPENSATION_REQUESTED`` handed it to compensation.
        taken_over: that hand-off was a takeover: the opener owns it no more.
        events: how many events were folded.
    """

    opener: str | None = None
    live: str | None = None
    to_compensation: bool = False
    taken_over: bool = False
    events: int = 0

    def after(self, event: WrittenEvent) -> SagaWriters:
        """The state once ``event`` is accepted into the chain."""
        kind = event.event_type
        if kind == _E.SAGA_OPENED:
            writer = writer_of(event)
            opener = self.opener if self.opener is not None else writer
            return replace(self, opener=opener, live=writer, events=self.events + 1)
        if kind in HANDOFF_EVENTS:
            takeover = (
                kind == _E.COMPENSATION_REQUESTED
                and event.attributes.get(attr.HANDOFF) == HANDOFF_TAKEOVER
            )
            return replace(
                self,
                live=None,
                to_compensation=self.to_compensation or kind == _E.COMPENSATION_REQUESTED,
                taken_over=self.taken_over or takeover,
                events=self.events + 1,
            )
        return replace(self, events=self.events + 1)

    @classmethod
    def of(cls, events: Iterable[WrittenEvent]) -> SagaWriters:
        """The state after ``events``, a saga's accepted chain in seq order."""
        state = cls()
        for event in events:
            state = state.after(event)
        return state


@dataclass(frozen=True, kw_only=True, slots=True)
class RegisteredWriter:
    """A writer as the registry knows it: its id and its role."""

    writer_id: str
    role: WriterRole = WriterRole.AGENT


def writer_refusal(
    writer: RegisteredWriter, saga: SagaWriters, event: WrittenEvent
) -> tuple[str, str] | None:
    """``None`` when ``writer`` may write ``event`` into the saga whose accepted chain so far
    folds to ``saga``, else ``(WRITER_NOT_OWNER, detail)``.

    The caller has established that ``writer`` wrote ``event`` (the registry's signature check)
    and that ``event`` extends the saga's chain.
    """
    kind = event.event_type
    wid, role = writer.writer_id, writer.role
    only = SERVICE_ONLY.get(kind)
    if only is not None and role is not only:
        return WRITER_NOT_OWNER, (
            f"{kind} is written only by a writer registered with role {only.value!r}; "
            f"writer {wid!r} has role {role.value!r}"
        )
    if saga.live is not None:
        if wid == saga.live:
            return None
        takeover = (
            kind == _E.COMPENSATION_REQUESTED
            and event.attributes.get(attr.HANDOFF) == HANDOFF_TAKEOVER
            and role is WriterRole.OPERATOR
        )
        if takeover:
            return None
        return WRITER_NOT_OWNER, (
            f"the saga is held by writer {saga.live!r}; writer {wid!r} (role {role.value!r}) "
            f"may not append {kind} to it"
        )
    if saga.events == 0 and kind == _E.SAGA_OPENED:
        return None  # a new saga: its opener owns it
    if wid == saga.opener and not saga.taken_over:
        return None
    if kind in ROLE_EVENTS[role]:
        if role is WriterRole.COMPENSATION and not saga.to_compensation:
            return WRITER_NOT_OWNER, (
                f"writer {wid!r} (role 'compensation') may write {kind} only after the saga "
                "was handed to compensation (COMPENSATION_REQUESTED)"
            )
        return None
    whose = (
        "was taken over from its opener"
        if saga.taken_over and wid == saga.opener
        else f"was opened by writer {saga.opener!r}"
        if saga.opener is not None
        else "has no SAGA_OPENED"
    )
    return WRITER_NOT_OWNER, (
        f"the saga {whose}; writer {wid!r} (role {role.value!r}) may not write {kind} in it"
    )
