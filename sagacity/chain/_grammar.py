"""What a saga's chain can say: the state machine of docs/adr/0005-saga-core-events.md.

A chain that links and hashes correctly can still tell an impossible story: an ``EXECUTED``
with no ``INTENT``, a gated tool run without the approvals its request needs, an undo of a
step that never ran, a tool called after the saga ended.  :func:`check` reads one saga's
accepted chain (seq order) and names every such event (:class:`GrammarRule`).  It judges only
what the chain itself proves; a story a writer can tell consistently (a tool journaled with a
reversibility it was not declared with, approvals by people who never approved) is beyond it.

Every auditor's tool calls this one module (``verify``, ``replay``, ``audit watch``); the
standalone bundle verifier keeps a copy, and ``verify``'s compiled path a twin that only tells
a clean story from any other (``native/src/grammar.rs``, advanced on the rows the chain check
streams; any other story is told here), both held to this one by the vectors
``tests/vectors/grammar-v1.json`` (docs/adr/0017-audit-coverage.md): a rule changed here is
changed there.

The rules are written against every flow the product journals; a rule is relaxed wherever a
legitimate flow could not be told from a forged one by the chain alone:

* compensation may run within an inline run (its work may raise without a trace on the
  chain), and after a cause: a ``COMPENSATION_REQUESTED``, a failed call (not one the tool
  refused before acting: ``FAILED`` with ``refused`` has no effect and causes nothing), a
  closing decision, a suspect or its settlement, or a run that ended ``COMPENSATION_PENDING``
  or ``COMPENSATION_FAILED`` (a settlement or a retry follows those);
* a ``REPLAYED`` call (its effect key already had an effect, docs/adr/0026) refers to an
  earlier call of its tool that executed, or to its tool's approval request;
* a gated call a standing grant covered (an ``INTENT`` with no ``ref_seq`` naming
  ``grant_seq`` and ``grant_id``) refers to an earlier ``GRANTED`` of its tool with that id,
  not revoked before it, and is never of a ``PRIVILEGED`` tool; whether the grant's signature,
  rules and deadline held is the acting process's judgement, not the chain's
  (docs/operations/grants.md);
* after an end ``COMPLETED``, ``COMPENSATED``, ``REJECTED`` or ``EXPIRED`` only an erasure or
  another ``SAGA_ENDED`` (a repeated compensation finds nothing to do and ends again) may
  follow; after ``COMPENSATION_FAILED``, no call and no decision;
* what a chain shows only as a commitment (an erased or sealed ``result``), an event type this
  release does not know, and whatever precedes the first seq held (retention) are not judged.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from sagacity.entries import _attributes as attr
from sagacity.entries._bounds import INT64_MAX, parse_int
from sagacity.entries._events import EventType
from sagacity.gate._requests import AWAITING_RESULT, CLOSING_EVENTS, ref_of, signatures_required
from sagacity.saga._result import SagaStatus
from sagacity.tools._reversibility import Reversibility


class GrammarRule(enum.StrEnum):
    """The impossible stories a chain may tell; each value is the finding's name."""

    REF_FORWARD = "grammar:ref_forward"
    """An event refers (``ref_seq``) to its own seq or a later one."""
    EXECUTED_WITHOUT_INTENT = "grammar:executed_without_intent"
    """An ``EXECUTED`` / ``FAILED`` whose ``ref_seq`` is no earlier ``INTENT`` of its tool, or
    whose ``INTENT`` already has an outcome."""
    GATED_WITHOUT_REQUEST = "grammar:gated_without_request"
    """An ``INTENT`` of an ``IRREVERSIBLE`` / ``PRIVILEGED`` tool that resumes no request and
    names no earlier, unrevoked ``GRANTED`` of its tool (a ``PRIVILEGED`` one never)."""
    RESUME_WITHOUT_REQUEST = "grammar:resume_without_request"
    """An ``INTENT`` whose ``ref_seq`` is no ``AWAITING_APPROVAL``, or one already closed."""
    RESUMED_WITHOUT_APPROVAL = "grammar:resumed_without_approval"
    """A request resumed with fewer distinct approvers than it needs (1 for ``IRREVERSIBLE``,
    2 for ``PRIVILEGED``; its journaled ``signatures_required`` may only raise that), or with
    another tool or payload than the one requested."""
    DECISION_WITHOUT_REQUEST = "grammar:decision_without_request"
    """A decision (``APPROVED``, ``REJECTED``, ``EXPIRED``, ``RESUME_REFUSED``, a resume's
    ``CONSTRAINT_VIOLATED``) that refers to no ``AWAITING_APPROVAL``."""
    COMPENSATION_WITHOUT_REQUEST = "grammar:compensation_without_request"
    """A compensation event with no cause: no ``COMPENSATION_REQUESTED``, failed call, closing
    decision or suspect before it, outside an inline run."""
    COMPENSATION_OF_NO_STEP = "grammar:compensation_of_no_step"
    """A compensation event or ``SUSPECT`` that refers to no step that ran (an ``EXECUTED``, or
    an ``INTENT`` settled ``executed``), or a ``COMPENSATED`` with no ``COMPENSATION_INTENT``."""
    SETTLEMENT_WITHOUT_SUSPECT = "grammar:settlement_without_suspect"
    """A ``SUSPECT_SETTLED`` that answers no ``SUSPECT`` of its step and phase."""
    AFTER_END = "grammar:after_end"
    """An event the saga's last ``SAGA_ENDED`` (or its ``ERASED``) rules out: a call, request or
    decision after the end, anything but an erasure after a clean end."""
    ERASED_WHILE_LIVE = "grammar:erased_while_live"
    """An ``ERASED`` that does not follow a final ``SAGA_ENDED``."""
    REPLAY_OF_NO_EFFECT = "grammar:replay_of_no_effect"
    """A ``REPLAYED`` whose ``ref_seq`` is neither an earlier ``INTENT`` of its tool with an
    ``EXECUTED`` outcome nor an approval request of its tool: it replays no effect."""


class Event(Protocol):
    """What the grammar reads of an entry (a :class:`~sagacity.JournalEntry` is one).

    ``payload`` and ``result`` are ``None`` where the chain shows only a commitment; the
    payload is only compared for equality, so a reader may give a digest of it instead.
    """

    @property
    def seq(self) -> int: ...
    @property
    def event_type(self) -> str: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def actor(self) -> str | None: ...
    @property
    def attributes(self) -> Mapping[str, str]: ...
    @property
    def payload(self) -> str | None: ...
    @property
    def result(self) -> str | None: ...


class Row(NamedTuple):
    """An :class:`Event` built from stored columns (an archive row, a bundle's event)."""

    seq: int
    event_type: str
    tool: str | None
    actor: str | None
    attributes: Mapping[str, str]
    payload: str | None
    result: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GrammarFinding:
    """One impossible event: the rule it breaks, its seq, why, and the writer it names."""

    rule: GrammarRule
    seq: int
    detail: str
    writer: str | None = None
    """The event's ``writer`` attribute: authenticated where the archive ingests with a writer
    registry (docs/adr/0014-signed-decisions-and-writers.md), the writer's own word elsewhere."""

    def describe(self) -> str:
        """The detail, naming the writer when the event names one."""
        return self.detail + (f" (written by writer {self.writer})" if self.writer else "")


_KNOWN = {t.value: t for t in EventType}
_QUIET_ENDS = frozenset(
    {SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.REJECTED, SagaStatus.EXPIRED}
)
"""Ends after which nothing but an erasure or another end can follow."""
_CAUSE_KEEPING_ENDS = frozenset({SagaStatus.COMPENSATION_PENDING, SagaStatus.COMPENSATION_FAILED})
"""Ends after which compensation may (still) run: handed over, or left dirty for a retry."""
_LIVE_ENDS = frozenset({SagaStatus.AWAITING_APPROVAL, SagaStatus.COMPENSATION_PENDING})
_CALLS_AND_DECISIONS = frozenset(
    {
        EventType.INTENT,
        EventType.EXECUTED,
        EventType.FAILED,
        EventType.AWAITING_APPROVAL,
        EventType.APPROVED,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.CONSTRAINT_VIOLATED,
        EventType.REPLAYED,
        EventType.GRANTED,
        EventType.GRANT_REVOKED,
    }
)
_AFTER_ANY_END = frozenset({EventType.SAGA_ENDED, EventType.ERASED})
_CAUSES = frozenset(
    {
        EventType.FAILED,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.COMPENSATION_REQUESTED,
        EventType.SUSPECT,
        EventType.SUSPECT_SETTLED,
    }
)
_COMPENSATION_EVENTS = frozenset(
    {EventType.COMPENSATION_INTENT, EventType.COMPENSATED, EventType.COMPENSATION_FAILED}
)
_DECISIONS = frozenset(
    {EventType.APPROVED, EventType.REJECTED, EventType.EXPIRED, EventType.RESUME_REFUSED}
)
_OPEN, _CLOSED, _UNKNOWN = "open", "closed", "unknown"
PHASE_CALL = "call"
SETTLED_EXECUTED = "executed"


def required_signatures(request: Event) -> int:
    """The approvers a request needs: what its declared reversibility demands (1 for
    ``IRREVERSIBLE``, 2 for ``PRIVILEGED``), raised, never lowered, by its journaled
    ``signatures_required`` (which counts 2 when unreadable)."""
    try:
        declared = Reversibility(request.attributes.get(attr.REVERSIBILITY, "")).signatures_required
    except ValueError:
        declared = 0
    return max(declared, signatures_required(request.attributes))


@dataclass(kw_only=True)
class _Request:
    tool: str | None
    payload: str | None
    required: int
    approvers: set[str] = field(default_factory=set)
    state: str = _OPEN
    closed_by: str = ""


@dataclass(kw_only=True, slots=True)
class SagaGrammar:
    """The grammar's state over one saga's chain; :meth:`feed` each event in seq order.

    Args:
        after_seq: the chain starts after this seq (retention removed the events before it):
            references to them, and the saga's state at the start, are not judged.
        limit: findings kept (the first ones); later events are still read.
    """

    after_seq: int = 0
    limit: int = 100
    findings: list[GrammarFinding] = field(default_factory=list)
    _known: bool = True
    _ended: str | None = None
    """The result of the last ``SAGA_ENDED`` with no ``SAGA_OPENED`` since (``""`` unreadable),
    ``None`` while a run is open (or nothing ended yet)."""
    _mode: str | None = None
    _cause: bool = False
    _erased: bool = False
    _last: EventType | None = None
    _intents: dict[int, str | None] = field(default_factory=dict)
    """Each ``INTENT``'s tool, by seq."""
    _outcomes: dict[int, int] = field(default_factory=dict)
    """Each ``INTENT``'s outcome seq, by the ``INTENT``'s seq."""
    _requests: dict[int, _Request] = field(default_factory=dict)
    _steps: set[int] = field(default_factory=set)
    _undoing: set[int] = field(default_factory=set)
    _suspects: set[tuple[int, str]] = field(default_factory=set)
    _grants: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    """Each ``GRANTED``'s tool and grant id, by seq."""
    _revoked: set[str] = field(default_factory=set)
    """The grant ids a ``GRANT_REVOKED`` named."""

    def __post_init__(self) -> None:
        # A chain held from mid-way: its state before the first event held is unknown.
        self._known = self.after_seq == 0
        self._cause = not self._known

    def _find(self, event: Event, rule: GrammarRule, detail: str) -> None:
        if len(self.findings) < self.limit:
            writer = event.attributes.get(attr.WRITER)
            self.findings.append(
                GrammarFinding(rule=rule, seq=event.seq, detail=detail, writer=writer or None)
            )

    def _unknown_ref(self, ref: int | None) -> bool:
        return ref is not None and ref <= self.after_seq

    def feed(self, event: Event) -> None:
        """Read the next event of the chain."""
        kind = _KNOWN.get(event.event_type)
        if kind is None:
            # A newer release's event: neutral, except that it may have closed a request.
            for request in self._requests.values():
                if request.state == _OPEN:
                    request.state = _UNKNOWN
            return
        ref = ref_of(event)
        if ref is not None and ref >= event.seq:
            self._find(
                event, GrammarRule.REF_FORWARD, f"{kind} at seq {event.seq} refers to seq {ref}"
            )
            ref = None
        elif (self._ended is None and not self._erased) or not self._after_end(event, kind):
            _HANDLERS.get(kind, SagaGrammar._neutral)(self, event, ref)
        if not self._cause and kind is not EventType.SAGA_ENDED:
            # A resume's CONSTRAINT_VIOLATED closes its request and ends the saga like a
            # decision; a refusal before acting had no effect and causes nothing.
            self._cause = (kind in _CAUSES and attr.REFUSED not in event.attributes) or (
                kind is EventType.CONSTRAINT_VIOLATED and ref is not None
            )
        self._last = kind

    def _after_end(self, event: Event, kind: EventType) -> bool:
        """Report ``event`` if the end before it rules it out; True when reported."""
        ended = self._ended
        if not self._known or kind is EventType.ERASED:
            return False
        why = None
        if self._erased and kind not in _AFTER_ANY_END:
            why = "the saga's data was erased"
        elif ended is None:
            return False
        elif ended in _QUIET_ENDS and kind not in _AFTER_ANY_END:
            why = f"the saga ended {ended}"
        elif ended == SagaStatus.COMPENSATION_FAILED and kind in _CALLS_AND_DECISIONS:
            why = f"the saga ended {ended}: no call or decision follows"
        elif kind in (EventType.AWAITING_APPROVAL, EventType.REPLAYED) or (
            kind is EventType.INTENT and ref_of(event) is None
        ):
            why = "a tool is called after the saga's run ended, with no SAGA_OPENED since"
        if why is None:
            return False
        self._find(event, GrammarRule.AFTER_END, f"{kind} at seq {event.seq}: {why}")
        return True

    # -- lifecycle ------------------------------------------------------------------------
    def _opened(self, event: Event, _ref: int | None) -> None:
        self._known = True
        self._ended = None
        self._mode = event.attributes.get(attr.COMPENSATION)

    def _end(self, event: Event, _ref: int | None) -> None:
        result = event.result or ""
        self._known = True
        self._ended = result
        # Handed over, or left dirty: compensation may follow (a settlement, a retry).
        self._cause = result in _CAUSE_KEEPING_ENDS or not result
        for request in self._requests.values():
            if request.state == _OPEN and result != AWAITING_RESULT:
                request.state = _UNKNOWN if not result else _CLOSED
                request.closed_by = f"the saga's end at seq {event.seq}"

    def _erase(self, event: Event, _ref: int | None) -> None:
        live = self._ended is None or self._ended in _LIVE_ENDS
        if self._known and (live or self._last not in _AFTER_ANY_END):
            self._find(
                event,
                GrammarRule.ERASED_WHILE_LIVE,
                f"ERASED at seq {event.seq} does not follow a final SAGA_ENDED",
            )
        self._erased = True

    # -- calls ----------------------------------------------------------------------------
    def _intent(self, event: Event, ref: int | None) -> None:
        self._intents[event.seq] = event.tool
        if ref is None:
            declared = event.attributes.get(attr.REVERSIBILITY, "")
            if declared in (Reversibility.IRREVERSIBLE, Reversibility.PRIVILEGED):
                why = self._ungranted(event, declared)
                if why is not None:
                    self._find(
                        event,
                        GrammarRule.GATED_WITHOUT_REQUEST,
                        f"INTENT at seq {event.seq} runs {declared} tool {event.tool!r} with no "
                        f"approval request{why}",
                    )
            return
        if self._unknown_ref(ref):
            return
        request = self._requests.get(ref)
        if request is None or request.state == _CLOSED:
            why = (
                "is no approval request"
                if request is None
                else f"was closed by {request.closed_by}"
            )
            self._find(
                event,
                GrammarRule.RESUME_WITHOUT_REQUEST,
                f"INTENT at seq {event.seq} resumes seq {ref}, which {why}",
            )
            return
        if request.state == _OPEN:
            self._check_resume(event, ref, request)
        request.state = _CLOSED
        request.closed_by = f"its resume at seq {event.seq}"

    def _ungranted(self, event: Event, declared: str) -> str | None:
        """Why the grant a gated ``INTENT`` names does not cover it (``""``: it names none;
        ``None``: it covers it, or refers before the chain held)."""
        raw = event.attributes.get(attr.GRANT_SEQ)
        if raw is None:
            return ""
        grant_seq = parse_int(raw, low=1, high=INT64_MAX)
        if grant_seq is not None and self._unknown_ref(grant_seq):
            return None
        found = self._grants.get(grant_seq) if grant_seq is not None else None
        grant_id = event.attributes.get(attr.GRANT_ID)
        if found is None or grant_seq is None or grant_seq >= event.seq:
            return f" (grant_seq {raw} is no earlier GRANTED)"
        if found != (event.tool, grant_id):
            return f" (GRANTED seq {grant_seq} grants another tool or id)"
        if grant_id in self._revoked:
            return f" (grant {grant_id} was revoked before it)"
        if declared == Reversibility.PRIVILEGED:
            return " (a PRIVILEGED tool is never granted)"
        return None

    def _granted(self, event: Event, _ref: int | None) -> None:
        self._grants[event.seq] = (event.tool, event.attributes.get(attr.GRANT_ID))

    def _grant_revoked(self, event: Event, _ref: int | None) -> None:
        grant_id = event.attributes.get(attr.GRANT_ID)
        if grant_id:
            self._revoked.add(grant_id)

    def _check_resume(self, event: Event, ref: int, request: _Request) -> None:
        if len(request.approvers) < request.required:
            who = ", ".join(sorted(request.approvers)) or "nobody"
            why = f"{len(request.approvers)} of the {request.required} approver(s) it needs ({who})"
        elif event.tool != request.tool:
            why = f"tool {event.tool!r}, the request is for {request.tool!r}"
        elif None not in (event.payload, request.payload) and event.payload != request.payload:
            why = "another payload than the one requested"
        else:
            return
        self._find(
            event,
            GrammarRule.RESUMED_WITHOUT_APPROVAL,
            f"INTENT at seq {event.seq} resumes request seq {ref} with {why}",
        )

    def _outcome(self, event: Event, ref: int | None) -> None:
        if self._unknown_ref(ref):
            if event.event_type == EventType.EXECUTED:
                self._steps.add(event.seq)  # its INTENT precedes the chain held
            return
        kind = event.event_type
        if ref is None or ref not in self._intents:
            why = "has no ref_seq" if ref is None else f"refers to seq {ref}, which is no INTENT"
        elif ref in self._outcomes:
            why = f"follows INTENT seq {ref}, whose outcome is seq {self._outcomes[ref]}"
        elif self._intents[ref] != event.tool:
            why = f"is for tool {event.tool!r}, INTENT seq {ref} for {self._intents[ref]!r}"
        else:
            self._outcomes[ref] = event.seq
            if kind == EventType.EXECUTED:
                self._steps.add(event.seq)
            return
        self._find(event, GrammarRule.EXECUTED_WITHOUT_INTENT, f"{kind} at seq {event.seq} {why}")

    def _replayed(self, event: Event, ref: int | None) -> None:
        if self._unknown_ref(ref):
            return
        request = self._requests.get(ref) if ref is not None else None
        if request is not None and request.tool == event.tool:
            return
        executed = ref is not None and self._outcomes.get(ref) in self._steps
        if executed and self._intents.get(ref or 0, "") == event.tool:
            return
        where = "no ref_seq" if ref is None else f"seq {ref}"
        self._find(
            event,
            GrammarRule.REPLAY_OF_NO_EFFECT,
            f"REPLAYED at seq {event.seq} replays {where}, which is no executed call or "
            f"request of tool {event.tool!r}",
        )

    # -- approvals ------------------------------------------------------------------------
    def _request(self, event: Event, _ref: int | None) -> None:
        self._requests[event.seq] = _Request(
            tool=event.tool, payload=event.payload, required=required_signatures(event)
        )

    def _decision(self, event: Event, ref: int | None) -> None:
        kind = _KNOWN[event.event_type]
        if kind is EventType.CONSTRAINT_VIOLATED and ref is None:
            return  # a first call refused by policy: no request involved
        if self._unknown_ref(ref):
            return
        request = self._requests.get(ref) if ref is not None else None
        if request is None:
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no approval request"
            self._find(
                event,
                GrammarRule.DECISION_WITHOUT_REQUEST,
                f"{kind} at seq {event.seq} decides on {where}",
            )
            return
        if request.state != _OPEN:
            return  # a late decision: the request's state ignores it
        if kind is EventType.APPROVED:
            if event.actor:
                request.approvers.add(event.actor)
        elif kind in CLOSING_EVENTS:
            request.state = _CLOSED
            request.closed_by = f"{kind} at seq {event.seq}"

    # -- compensation ---------------------------------------------------------------------
    def _handed_over(self, event: Event, _ref: int | None) -> None:
        for request in self._requests.values():
            if request.state == _OPEN:
                request.state = _CLOSED
                request.closed_by = f"COMPENSATION_REQUESTED at seq {event.seq}"

    def _compensation(self, event: Event, ref: int | None) -> None:
        kind = _KNOWN[event.event_type]
        inline_run = self._ended is None and self._mode != "delegated"
        if not (self._cause or inline_run):
            self._find(
                event,
                GrammarRule.COMPENSATION_WITHOUT_REQUEST,
                f"{kind} at seq {event.seq}: nothing asked for compensation",
            )
        if self._unknown_ref(ref):
            return
        if ref is None or ref not in self._steps:
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no step that ran"
            self._find(
                event,
                GrammarRule.COMPENSATION_OF_NO_STEP,
                f"{kind} at seq {event.seq} undoes {where}",
            )
        elif kind is EventType.COMPENSATION_INTENT:
            self._undoing.add(ref)
        elif kind is EventType.COMPENSATED and ref not in self._undoing:
            self._find(
                event,
                GrammarRule.COMPENSATION_OF_NO_STEP,
                f"COMPENSATED at seq {event.seq}: no COMPENSATION_INTENT for step seq {ref}",
            )

    def _suspect(self, event: Event, ref: int | None) -> None:
        phase = event.attributes.get(attr.PHASE, PHASE_CALL)
        if ref is not None:
            self._suspects.add((ref, phase))
        if self._unknown_ref(ref):
            return
        known = self._intents if phase == PHASE_CALL else self._steps
        if ref is None or ref not in known:
            what = "INTENT" if phase == PHASE_CALL else "step that ran"
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no {what}"
            self._find(
                event,
                GrammarRule.COMPENSATION_OF_NO_STEP,
                f"SUSPECT at seq {event.seq} (phase {phase}) doubts {where}",
            )

    def _settled(self, event: Event, ref: int | None) -> None:
        phase = event.attributes.get(attr.PHASE, PHASE_CALL)
        if self._unknown_ref(ref):
            return
        if ref is None or (ref, phase) not in self._suspects:
            where = "no ref_seq" if ref is None else f"step seq {ref} (phase {phase})"
            self._find(
                event,
                GrammarRule.SETTLEMENT_WITHOUT_SUSPECT,
                f"SUSPECT_SETTLED at seq {event.seq} settles {where}, which no SUSPECT doubts",
            )
            return
        if phase == PHASE_CALL and event.attributes.get(attr.OUTCOME) == SETTLED_EXECUTED:
            self._steps.add(ref)  # the call took effect: it is undone like an executed step

    def _neutral(self, event: Event, ref: int | None) -> None:
        """An event the grammar only orders (nothing refers to it)."""


_HANDLERS = {
    EventType.SAGA_OPENED: SagaGrammar._opened,
    EventType.SAGA_ENDED: SagaGrammar._end,
    EventType.ERASED: SagaGrammar._erase,
    EventType.INTENT: SagaGrammar._intent,
    EventType.EXECUTED: SagaGrammar._outcome,
    EventType.FAILED: SagaGrammar._outcome,
    EventType.AWAITING_APPROVAL: SagaGrammar._request,
    EventType.APPROVED: SagaGrammar._decision,
    EventType.REJECTED: SagaGrammar._decision,
    EventType.EXPIRED: SagaGrammar._decision,
    EventType.RESUME_REFUSED: SagaGrammar._decision,
    EventType.CONSTRAINT_VIOLATED: SagaGrammar._decision,
    EventType.COMPENSATION_REQUESTED: SagaGrammar._handed_over,
    EventType.COMPENSATION_INTENT: SagaGrammar._compensation,
    EventType.COMPENSATED: SagaGrammar._compensation,
    EventType.COMPENSATION_FAILED: SagaGrammar._compensation,
    EventType.SUSPECT: SagaGrammar._suspect,
    EventType.SUSPECT_SETTLED: SagaGrammar._settled,
    EventType.REPLAYED: SagaGrammar._replayed,
    EventType.GRANTED: SagaGrammar._granted,
    EventType.GRANT_REVOKED: SagaGrammar._grant_revoked,
}


def check(events: Iterable[Event], *, after_seq: int = 0, limit: int = 100) -> list[GrammarFinding]:
    """Every impossible event of one saga's accepted chain (in seq order), first ones first.

    Args:
        events: the chain, verified, in seq order.
        after_seq: the chain starts after this seq (a retention anchor, a trimmed topic).
        limit: findings kept.
    """
    grammar = SagaGrammar(after_seq=after_seq, limit=limit)
    for event in events:
        grammar.feed(event)
    return grammar.findings
