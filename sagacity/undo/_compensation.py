"""The compensation runner: undo a saga's executed steps, working from its chain alone.

It needs the chain, the tool registry and a journal, nothing else, so the compensation
service runs the same code as the in-process core.  It is safe to run again on a chain it
(or a crashed predecessor) already worked on:

* only ``EXECUTED`` entries are undone, newest first; ``READ`` steps are skipped;
* a step whose last compensation event is ``COMPENSATED`` is skipped (no double refund);
* a ``COMPENSATION_INTENT`` without an outcome means the undo may or may not have happened:
  it is retried only when the compensation is declared ``idempotent``, else it is ``SUSPECT``;
* an ``INTENT`` without an outcome is ``SUSPECT`` (journaled once): an effect may exist whose
  result nobody knows; it is never compensated blindly;
* a failing compensation is journaled ``COMPENSATION_FAILED`` and the run goes on; a step that
  failed before (with an error, or because its tool was not registered) is tried again;
* which undo a step gets is the runner's own declaration of its tool (``sagacity.undo._undo_plan``):
  a tool not registered here, a gated tool, an undo the declaration does not name or that is
  gated, are journaled ``COMPENSATION_FAILED`` with a named cause and never called;
* steps that cannot be undone (irreversible, ``"undo": None``, no compensation declared) are
  journaled once and reported dirty;
* a suspect a person settled (``SUSPECT_SETTLED``, see ``sagacity.gate._settlement``) is planned as
  they said: a call that ``executed`` is undone like any executed step, one that did not (or
  that was fixed by hand) is closed; an undo in doubt that ``executed`` is done, one that did
  not is called again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sagacity.entries import _attributes as attr
from sagacity.entries._events import (
    EntryDraft,
    EventType,
    JournalEntry,
    UnknownEventType,
    now_micros,
)
from sagacity.errors import (
    CompensationConflictError,
    CompensationInterruptedError,
    TailMovedError,
)
from sagacity.gate._settlement import SettlementOutcome
from sagacity.journal import ConditionalJournal, Journal
from sagacity.saga._result import SagaStatus, Step
from sagacity.telemetry import _tracing
from sagacity.tools._codec import describe_error, encode_result
from sagacity.tools._invoke import call_async, call_blocking
from sagacity.tools._registry import ToolRegistry
from sagacity.tools._reversibility import Reversibility
from sagacity.undo._undo_plan import (
    CAUSE_ERROR,
    CAUSE_UNREGISTERED,
    FINAL_CAUSES,
    NoUndo,
    journaled_reversibility_note,
    plan_undo,
)

PHASE_CALL = "call"
PHASE_COMPENSATION = "compensation"

_OUTCOMES = (EventType.EXECUTED, EventType.FAILED)
_STEP_EVENTS = (
    EventType.COMPENSATION_INTENT,
    EventType.COMPENSATED,
    EventType.COMPENSATION_FAILED,
    EventType.SUSPECT,
)


@dataclass(frozen=True, kw_only=True)
class CompensationReport:
    """What a compensation run did.

    Attributes:
        saga_id: the saga.
        compensated: ``EXECUTED`` seqs undone in this run, in the order undone.
        dirty: steps still not undone (with the reason).
        suspects: ``INTENT`` entries (or in-doubt compensations) needing a person.
    """

    saga_id: str
    compensated: tuple[int, ...] = ()
    dirty: tuple[Step, ...] = ()
    suspects: tuple[Step, ...] = ()

    @property
    def status(self) -> SagaStatus:
        """``COMPENSATED`` when nothing is left dirty or suspect, else ``COMPENSATION_FAILED``."""
        if self.dirty or self.suspects:
            return SagaStatus.COMPENSATION_FAILED
        return SagaStatus.COMPENSATED


@dataclass(frozen=True, kw_only=True)
class CompensationCall:
    """One undo the runner is about to make (after journaling its ``COMPENSATION_INTENT``).

    Services wrap :meth:`invoke` to add a timeout or an idempotency claim; see the
    ``invoke`` hook of :class:`CompensationRunner`.

    Attributes:
        step: the ``EXECUTED`` entry being undone.
        target: the compensation (``by=``) or undo tool called.
        function: the callable; ``args`` / ``kwargs`` its arguments.
        payload: the undo tool's arguments as journaled (``None`` for a ``by=`` compensation).
        idempotent: the compensation is declared idempotent.
        retry_after_settlement: an earlier attempt was in doubt and a person settled that it
            did not take effect, so calling again is allowed (once) even if not idempotent.
    """

    step: JournalEntry
    target: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    payload: str | None
    idempotent: bool = False
    retry_after_settlement: bool = False

    @property
    def saga_id(self) -> str:
        """The saga."""
        return self.step.saga_id

    @property
    def seq(self) -> int:
        """The ``EXECUTED`` seq being undone."""
        return self.step.seq

    @property
    def idempotency_key(self) -> str:
        """``"{saga_id}:{seq}"``, the key an external undo should be made idempotent on."""
        return f"{self.step.saga_id}:{self.step.seq}"

    def invoke(self) -> Any:
        """Make the call, blocking (an async compensation is run to completion)."""
        return call_blocking(self.function, *self.args, **self.kwargs)

    async def invoke_async(self) -> Any:
        """Make the call on the running loop (a sync compensation is called directly)."""
        return await call_async(self.function, *self.args, **self.kwargs)


@dataclass(frozen=True, kw_only=True)
class _Note:
    """A planned journal entry that is not an undo call (a suspect, an impossible undo)."""

    draft: EntryDraft | None
    dirty: Step | None = None
    suspect: Step | None = None


class CompensationRunner:
    """Undoes a saga's executed steps; see the module documentation for the rules.

    Args:
        journal: where the chain is read and the compensation journaled.
        registry: the tools (and their compensations) by journaled name.
        actor: recorded as the ``actor`` of the entries the runner writes.
        clock: microseconds since the epoch, for the entries' time.
        invoke: makes each call in :meth:`run` (default :meth:`CompensationCall.invoke`);
            a service passes one that adds a timeout or claims the step first.  Whatever it
            raises is journaled ``COMPENSATION_FAILED``, except
            :class:`~sagacity.errors.CompensationInterruptedError` (the undo was not called):
            the run stops there, journaling nothing for the step.
        invoke_async: the same for :meth:`run_async`.
        settlement_counts: whether a ``SUSPECT_SETTLED`` may be acted on (a signed decision
            verifying against the pinned approvals key, docs/adr/0014); one that does not is
            ignored and its step stays suspect.  ``None``: every settlement counts.
    """

    def __init__(
        self,
        journal: Journal,
        registry: ToolRegistry,
        *,
        actor: str | None = None,
        clock: Callable[[], int] = now_micros,
        invoke: Callable[[CompensationCall], Any] | None = None,
        invoke_async: Callable[[CompensationCall], Awaitable[Any]] | None = None,
        settlement_counts: Callable[[JournalEntry], bool] | None = None,
    ) -> None:
        self._settlement_counts = settlement_counts
        self._journal = journal
        self._registry = registry
        self._actor = actor
        self._clock = clock
        # Each undo is a span of its own while tracing is on (sagacity.telemetry._tracing).
        self._invoke = _tracing.undo_invoker(invoke or CompensationCall.invoke)
        self._invoke_async = _tracing.undo_invoker_async(
            invoke_async or CompensationCall.invoke_async
        )

    # -- planning (pure) ------------------------------------------------------------------
    def _draft(self, step: JournalEntry, event: EventType, **fields: Any) -> EntryDraft:
        attributes = {attr.REF_SEQ: str(step.seq), **fields.pop("attributes", {})}
        return EntryDraft(
            saga_id=step.saga_id,
            event_type=event,
            tool=step.tool,
            actor=self._actor,
            attributes=attributes,
            recorded_at_us=self._clock(),
            **fields,
        )

    def _failed(self, step: JournalEntry, cause: str, error: str) -> _Note:
        return _Note(
            draft=self._draft(
                step, EventType.COMPENSATION_FAILED, error=error, attributes={attr.CAUSE: cause}
            ),
            dirty=Step(seq=step.seq, tool=step.tool, reason=error),
        )

    def plan(self, entries: Sequence[JournalEntry]) -> list[CompensationCall | _Note]:
        """What a run would do on ``entries``, newest step first (journals nothing)."""
        by_seq = {entry.seq: entry for entry in entries}
        outcome_of: dict[int, JournalEntry] = {}
        step_events: dict[int, list[JournalEntry]] = {}
        call_suspects: set[int] = set()
        settled_calls: dict[int, JournalEntry] = {}
        seen_settlements: set[tuple[int, str | None]] = set()
        for entry in entries:
            ref = entry.ref_seq
            if ref is None:
                continue
            if entry.event_type is EventType.SUSPECT_SETTLED:
                if self._settlement_counts is not None and not self._settlement_counts(entry):
                    continue  # not the approvals service's word: the step stays in doubt
                settled = (ref, entry.attributes.get(attr.PHASE))
                if settled in seen_settlements:
                    continue  # a step is settled once: a later copy is not a new word
                seen_settlements.add(settled)
                if entry.attributes.get(attr.PHASE) == PHASE_CALL:
                    settled_calls[ref] = entry
                else:
                    step_events.setdefault(ref, []).append(entry)
            elif entry.event_type in _OUTCOMES:
                outcome_of[ref] = entry
            elif entry.event_type is EventType.SUSPECT and (
                entry.attributes.get(attr.PHASE) == PHASE_CALL
            ):
                call_suspects.add(ref)
            elif entry.event_type in _STEP_EVENTS:
                step_events.setdefault(ref, []).append(entry)

        actions: list[CompensationCall | _Note] = []
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            if entry.event_type is EventType.INTENT and entry.seq in settled_calls:
                if entry.seq in outcome_of:
                    continue
                said = settled_calls[entry.seq].attributes.get(attr.OUTCOME)
                if said == SettlementOutcome.EXECUTED.value:
                    # A person found the effect exists: undo it like an executed step (the
                    # INTENT stands for the step; its compensation events refer to it).
                    action = self._plan_step(entry, entry, step_events.get(entry.seq, []))
                    if action is not None:
                        actions.append(action)
            elif entry.event_type is EventType.INTENT and entry.seq not in outcome_of:
                reason = "INTENT without an outcome: an effect may exist; needs a person"
                suspect = Step(seq=entry.seq, tool=entry.tool, reason=reason)
                draft = None
                if entry.seq not in call_suspects:
                    draft = self._draft(
                        entry,
                        EventType.SUSPECT,
                        payload=entry.payload,
                        error=reason,
                        attributes={
                            attr.PHASE: PHASE_CALL,
                            # A redacted payload keeps its salts beside it (ADR 0019 §5).
                            **{k: v for k, v in entry.attributes.items() if k == attr.REDACTION},
                        },
                    )
                actions.append(_Note(draft=draft, suspect=suspect))
            elif entry.event_type is EventType.EXECUTED:
                intent = by_seq.get(entry.ref_seq or 0)
                action = self._plan_step(entry, intent, step_events.get(entry.seq, []))
                if action is not None:
                    actions.append(action)
            elif isinstance(entry.event_type, UnknownEventType):
                # A newer release wrote it: this one cannot tell whether it recorded an effect
                # that needs undoing, so the known steps are undone but the saga is not
                # reported clean (a person decides).  Nothing is journaled for it.
                reason = (
                    f"event type {entry.event_type.value} is unknown to this release: "
                    "whether it needs undoing cannot be judged"
                )
                actions.append(
                    _Note(draft=None, dirty=Step(seq=entry.seq, tool=entry.tool, reason=reason))
                )
        return actions

    def _plan_step(
        self, step: JournalEntry, intent: JournalEntry | None, history: list[JournalEntry]
    ) -> CompensationCall | _Note | None:
        # What the step's tool is and how it is undone come from this runner's own
        # registry, never from the step's attributes: every agent writes its own saga.
        registered = self._registry.get(step.tool or "")
        if registered is not None and registered.reversibility is Reversibility.READ:
            return None
        last = history[-1] if history else None
        if last is not None and last.event_type is EventType.COMPENSATED:
            return None
        if (
            last is not None
            and last.event_type is EventType.COMPENSATION_FAILED
            and last.attributes.get(attr.CAUSE) in FINAL_CAUSES
        ):
            return _Note(
                draft=None,
                dirty=Step(seq=step.seq, tool=step.tool, reason=last.error or "no undo"),
            )
        if last is not None and last.event_type is EventType.SUSPECT:
            return _Note(
                draft=None,
                suspect=Step(seq=step.seq, tool=step.tool, reason=last.error or "in doubt"),
            )
        retry = False
        if last is not None and last.event_type is EventType.SUSPECT_SETTLED:
            if last.attributes.get(attr.OUTCOME) != SettlementOutcome.NOT_EXECUTED.value:
                return None  # the undo took effect, or a person repaired the step
            retry = True
        in_doubt = last is not None and last.event_type is EventType.COMPENSATION_INTENT

        if registered is None:
            return self._failed(
                step,
                CAUSE_UNREGISTERED,
                f"tool {step.tool!r} is not registered here; its compensation is unknown"
                + journaled_reversibility_note(step, None),
            )
        planned = plan_undo(self._registry, registered, step, intent)
        if isinstance(planned, NoUndo):
            return self._failed(step, planned.cause, planned.reason)
        undo = CompensationCall(
            step=step,
            target=planned.target,
            function=planned.function,
            args=planned.args,
            kwargs=planned.kwargs,
            payload=planned.payload,
            idempotent=planned.idempotent,
            retry_after_settlement=retry,
        )
        if in_doubt and not undo.idempotent:
            reason = (
                "COMPENSATION_INTENT without an outcome and the compensation is not declared "
                "idempotent: it may have run; needs a person"
            )
            return _Note(
                draft=self._draft(
                    step,
                    EventType.SUSPECT,
                    error=reason,
                    attributes={attr.PHASE: PHASE_COMPENSATION},
                ),
                suspect=Step(seq=step.seq, tool=step.tool, reason=reason),
            )
        return undo

    # -- running --------------------------------------------------------------------------
    def _intent(self, undo: CompensationCall) -> EntryDraft:
        return self._draft(
            undo.step,
            EventType.COMPENSATION_INTENT,
            payload=undo.payload,
            attributes={attr.COMPENSATION: undo.target},
        )

    def _outcome(self, undo: CompensationCall, value: Any) -> EntryDraft:
        text, encoding = encode_result(value)
        return self._draft(
            undo.step,
            EventType.COMPENSATED,
            result=text,
            attributes={attr.RESULT_ENCODING: encoding},
        )

    def _error(self, undo: CompensationCall, exc: BaseException) -> EntryDraft:
        return self._draft(
            undo.step,
            EventType.COMPENSATION_FAILED,
            error=describe_error(exc),
            attributes={attr.CAUSE: CAUSE_ERROR},
        )

    def _lead(self, draft: EntryDraft, tail: int) -> JournalEntry:
        """Append an entry that starts an action (an undo, a suspect) onto the chain as read.

        With a journal offering compare-and-append, a chain that another writer extended
        since (another compensator) stops this run before it acts.  Outcomes of calls already
        made are appended unconditionally: a losing append must never be dropped.
        """
        if isinstance(self._journal, ConditionalJournal):
            try:
                return self._journal.append_after(draft, after_seq=tail, durable=True)
            except TailMovedError as exc:
                raise CompensationConflictError(
                    f"saga {draft.saga_id!r} changed while it was being compensated (another "
                    "compensator?); this run stopped before acting again",
                    saga_id=draft.saga_id,
                ) from exc
        return self._journal.append(draft, durable=True)

    async def _lead_async(self, draft: EntryDraft, tail: int) -> JournalEntry:
        if isinstance(self._journal, ConditionalJournal):
            return await asyncio.to_thread(self._lead, draft, tail)
        return await self._journal.append_async(draft, durable=True)

    def run(
        self, saga_id: str, entries: Sequence[JournalEntry] | None = None
    ) -> CompensationReport:
        """Compensate ``saga_id`` (its chain is read from the journal unless given).

        Raises:
            CompensationConflictError: another run of the same saga is in progress in this
                process, or another writer extended the chain meanwhile.
            CompensationInterruptedError: from ``invoke``: an undo was not called; what was
                journaled so far stays valid and a later run picks up from it.
            JournalError: the journal failed; what was journaled so far stays valid and a
                later run picks up from it.
        """
        with _exclusive(self._journal, saga_id):
            chain = list(entries) if entries is not None else list(self._journal.entries(saga_id))
            tail = chain[-1].seq if chain else 0
            report = _Collector(saga_id)
            for action in self.plan(chain):
                if isinstance(action, _Note):
                    if action.draft is not None:
                        tail = self._lead(action.draft, tail).seq
                    report.note(action)
                    continue
                tail = self._lead(self._intent(action), tail).seq
                try:
                    value = self._invoke(action)
                except CompensationInterruptedError:
                    raise  # not the step's outcome: its intent stays open for the next run
                except Exception as exc:
                    tail = self._journal.append(self._error(action, exc), durable=True).seq
                    report.failed(action, exc)
                    continue
                except BaseException as exc:
                    self._journal.append(self._error(action, exc), durable=True)
                    raise
                tail = self._journal.append(self._outcome(action, value), durable=True).seq
                report.done(action)
            return report.build()

    async def run_async(
        self, saga_id: str, entries: Sequence[JournalEntry] | None = None
    ) -> CompensationReport:
        """:meth:`run` for asyncio: async compensations are awaited on the running loop."""
        journal = self._journal
        with _exclusive(journal, saga_id):
            chain = list(entries) if entries is not None else list(journal.entries(saga_id))
            tail = chain[-1].seq if chain else 0
            report = _Collector(saga_id)
            for action in self.plan(chain):
                if isinstance(action, _Note):
                    if action.draft is not None:
                        tail = (await self._lead_async(action.draft, tail)).seq
                    report.note(action)
                    continue
                tail = (await self._lead_async(self._intent(action), tail)).seq
                try:
                    value = await self._invoke_async(action)
                except CompensationInterruptedError:
                    raise  # not the step's outcome: its intent stays open for the next run
                except Exception as exc:
                    failed = await journal.append_async(self._error(action, exc), durable=True)
                    tail = failed.seq
                    report.failed(action, exc)
                    continue
                except BaseException as exc:
                    await journal.append_async(self._error(action, exc), durable=True)
                    raise
                done = await journal.append_async(self._outcome(action, value), durable=True)
                tail = done.seq
                report.done(action)
            return report.build()


_running: set[tuple[int, str]] = set()
_running_lock = threading.Lock()


@contextlib.contextmanager
def _exclusive(journal: Journal, saga_id: str) -> Iterator[None]:
    """One compensation run per saga and journal at a time in this process."""
    key = (id(journal), saga_id)
    with _running_lock:
        if key in _running:
            raise CompensationConflictError(
                f"saga {saga_id!r} is already being compensated in this process",
                saga_id=saga_id,
            )
        _running.add(key)
    try:
        yield
    finally:
        with _running_lock:
            _running.discard(key)


class _Collector:
    def __init__(self, saga_id: str) -> None:
        self.saga_id = saga_id
        self.compensated: list[int] = []
        self.dirty: list[Step] = []
        self.suspects: list[Step] = []

    def note(self, note: _Note) -> None:
        if note.dirty is not None:
            self.dirty.append(note.dirty)
        if note.suspect is not None:
            self.suspects.append(note.suspect)

    def failed(self, undo: CompensationCall, exc: BaseException) -> None:
        self.dirty.append(Step(seq=undo.step.seq, tool=undo.step.tool, reason=describe_error(exc)))

    def done(self, undo: CompensationCall) -> None:
        self.compensated.append(undo.step.seq)

    def build(self) -> CompensationReport:
        return CompensationReport(
            saga_id=self.saga_id,
            compensated=tuple(self.compensated),
            dirty=tuple(self.dirty),
            suspects=tuple(self.suspects),
        )
