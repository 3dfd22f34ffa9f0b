"""``Sagacity``: the facade an application holds: wrap tools, run sagas, decide gates."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast

from sagacity import _approval, _resume, _settlement, _tracing
from sagacity import _attributes as attr
from sagacity._codec import describe_error
from sagacity._compensation import CompensationCall, CompensationReport, CompensationRunner
from sagacity._decision_signature import DecisionSigner, DecisionVerifier, verifier_from_env
from sagacity._decorators import Constraint, ToolDefinition
from sagacity._envelope import KEK_SETTING
from sagacity._events import EntryDraft, EventType, JournalEntry, now_micros
from sagacity._memory import InMemoryJournal
from sagacity._outcome import outcome_from_chain
from sagacity._oversize import append_bounded
from sagacity._registry import ToolRegistry
from sagacity._result import SagaResult, SagaStatus
from sagacity._reversibility import Reversibility
from sagacity._run import SagaRun
from sagacity._scope import SagaScope, ensure_no_active_scope, open_scope
from sagacity._undo import UndoCall
from sagacity._wrap import wrap, wrap_callable
from sagacity.errors import (
    ConfigurationError,
    InvalidArgumentError,
    OutcomeTimeoutError,
    SagaExistsError,
)
from sagacity.journal import ApprovalRequest, Journal, journal_seals

_T = TypeVar("_T")

CompensationMode = Literal["inline", "delegated"]
_MODES = ("inline", "delegated")
ApprovalTrust = Literal["signed", "local", "unverifiable"]


def _default_writer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _verifier(
    pinned: str | DecisionVerifier | None, signer: DecisionSigner | None
) -> DecisionVerifier | None:
    keys: list[bytes] = [] if signer is None else [signer.public_raw]
    if isinstance(pinned, DecisionVerifier):
        keys.extend(pinned.public_keys)
    elif isinstance(pinned, str):
        keys.extend(DecisionVerifier.parse(pinned).public_keys)
    elif pinned is not None:
        raise ConfigurationError("approvals_public_key must be a str or a DecisionVerifier")
    return DecisionVerifier(keys) if keys else None


def check_saga_id(saga_id: object) -> str:
    """``saga_id`` if it is a non-empty str.

    Raises:
        InvalidArgumentError: otherwise.
    """
    if not isinstance(saga_id, str) or not saga_id.strip():
        raise InvalidArgumentError(f"saga_id must be a non-empty str, got {saga_id!r}")
    return saga_id


class Sagacity:
    """Compensation, approval gates and a verifiable journal for an agent's tool calls.

    Args:
        journal: where every step is recorded (an :class:`InMemoryJournal` when omitted).
        compensation: ``"inline"`` (default): compensate in this process when a saga fails;
            ``"delegated"``: journal ``COMPENSATION_REQUESTED`` for the compensation service
            and report :attr:`SagaStatus.COMPENSATION_PENDING`.
        approval_ttl: how long an approval request stays open (``None``: no limit); a request
            past it is journaled ``EXPIRED`` on its next decision and the saga compensated.
            It is journaled on the requests this Sagacity makes and bounds the requests it
            decides on (a deciding service's TTL applies to requests made without one).
        policy_version: recorded on every request and decision: which approval policy was in
            force.
        writer_id: this process's identity on the chain (``SAGA_OPENED.actor``); defaults
            to the journal's ``writer_id`` when it has one, else ``host:pid:random``.
        clock: microseconds since the epoch (for tests); defaults to the wall clock.
        decision_signer: the approvals service's key: decisions this Sagacity journals
            (``APPROVED``, ``REJECTED``, ``EXPIRED``) carry its signature.
        approvals_public_key: the pinned public key(s) an approval must be signed with to
            count at resume (hex or key files, comma-separated, or a
            :class:`DecisionVerifier`).  Without one, decisions are trusted only on an
            :class:`InMemoryJournal` (one process wrote them all); on any other journal every
            resume is refused (see :attr:`approval_trust`).  A ``decision_signer`` pins its own
            key as well.

    Raises:
        ConfigurationError: an option is invalid.
    """

    def __init__(
        self,
        journal: Journal | None = None,
        *,
        compensation: CompensationMode = "inline",
        approval_ttl: timedelta | float | None = None,
        policy_version: str = "1",
        writer_id: str | None = None,
        clock: Callable[[], int] | None = None,
        decision_signer: DecisionSigner | None = None,
        approvals_public_key: str | DecisionVerifier | None = None,
    ) -> None:
        if compensation not in _MODES:
            raise ConfigurationError(
                f"compensation must be one of {', '.join(_MODES)}, got {compensation!r}"
            )
        if journal is not None and not isinstance(journal, Journal):
            raise ConfigurationError(f"journal does not implement the Journal port: {journal!r}")
        if not isinstance(policy_version, str) or not policy_version:
            raise ConfigurationError("policy_version must be a non-empty str")
        if writer_id is not None and (not isinstance(writer_id, str) or not writer_id):
            raise ConfigurationError("writer_id must be a non-empty str")
        ttl_us: int | None = None
        if approval_ttl is not None:
            seconds = (
                approval_ttl.total_seconds()
                if isinstance(approval_ttl, timedelta)
                else float(approval_ttl)
            )
            if seconds <= 0:
                raise ConfigurationError("approval_ttl must be positive")
            ttl_us = int(seconds * 1_000_000)
        self._journal: Journal = journal if journal is not None else InMemoryJournal()
        self._mode: CompensationMode = compensation
        self._approval_ttl_us = ttl_us
        self._policy_version = policy_version
        journal_writer = getattr(journal, "writer_id", None)
        self._writer_id = (
            writer_id
            or (journal_writer if isinstance(journal_writer, str) and journal_writer else None)
            or _default_writer_id()
        )
        self._clock = clock or now_micros
        if decision_signer is not None and not isinstance(decision_signer, DecisionSigner):
            raise ConfigurationError("decision_signer must be a DecisionSigner")
        self._signer = decision_signer
        self._verifier = _verifier(approvals_public_key, decision_signer)
        self._registry = ToolRegistry(admit=self._admit_tool)
        self._desk = _approval.ApprovalDesk(self)
        self._resumer = _resume.Resumer(self, self._desk)
        self._suspects = _settlement.SuspectDesk(self)
        self._conversations: dict[str, SagaRun] = {}
        self._conversations_lock = threading.Lock()

    @classmethod
    def from_env(cls, **options: Any) -> Sagacity:
        """A ``Sagacity`` on the Kafka journal configured by ``SAGACITY_*`` variables.

        Compensation is delegated to the compensation service, and approvals are verified
        against ``SAGACITY_APPROVALS_PUBLIC_KEY`` when it is set.  ``options`` are passed to
        the constructor.

        Raises:
            ConfigurationError: the Kafka journal is not available in this installation.
        """
        try:
            # The composition root imports the Kafka adapter: lazily, so the core imports
            # without it (tests/architecture/test_layers.py names this edge).
            from sagacity._env import journal_from_env
        except ImportError as exc:
            raise ConfigurationError(
                "Sagacity.from_env() needs the Kafka journal (sagacity._env."
                f"journal_from_env), which cannot be imported: {exc}"
            ) from exc
        options.setdefault("compensation", "delegated")
        if options.get("approvals_public_key") is None:
            options["approvals_public_key"] = verifier_from_env()
        _tracing.configure_from_env("sagacity-agent")
        writer_id = options.get("writer_id")
        journal: Journal = (
            journal_from_env(writer_id=writer_id) if writer_id else journal_from_env()
        )
        return cls(journal, **options)

    # -- properties -----------------------------------------------------------------------
    @property
    def journal(self) -> Journal:
        """The journal every step is recorded in."""
        return self._journal

    @property
    def registry(self) -> ToolRegistry:
        """Wrapped tools by journaled name."""
        return self._registry

    @property
    def compensation_mode(self) -> CompensationMode:
        """``"inline"`` or ``"delegated"``."""
        return self._mode

    @property
    def writer_id(self) -> str:
        """This process's identity on the chain."""
        return self._writer_id

    @property
    def policy_version(self) -> str:
        """The approval policy recorded on requests and decisions."""
        return self._policy_version

    @property
    def decision_signer(self) -> DecisionSigner | None:
        """The key decisions are signed with (``None``: they are journaled unsigned)."""
        return self._signer

    @property
    def journal_identity(self) -> str:
        """The journal's name in signed decisions: a decision names the journal it was made on
        and counts on no other (the journal's ``identity``: ``SAGACITY_JOURNAL_NAME``, else
        ``kafka:<cluster id>/<topic>``; docs/adr/0025-trust-model.md)."""
        identity = getattr(self._journal, "identity", None)
        if isinstance(identity, str) and identity:
            return identity
        return f"{type(self._journal).__name__}:{id(self._journal):x}"

    @property
    def decision_verifier(self) -> DecisionVerifier | None:
        """The pinned keys approvals are verified against (``None``: none pinned)."""
        return self._verifier

    @property
    def approval_trust(self) -> ApprovalTrust:
        """What an approval must be to count at resume.

        ``"signed"``: signed by a pinned approvals key (an unsigned or wrongly signed one is
        refused, journaled and the saga compensated).  ``"local"``: no key is pinned and the
        journal is an :class:`InMemoryJournal`, which only this process writes: approvals are
        trusted as journaled (single-process use; nothing is proven to a third party).
        ``"unverifiable"``: no key is pinned on a shared journal: every resume is refused with
        ``"no human approval recorded"`` (the request stays pending) until one is.
        """
        if self._verifier is not None:
            return "signed"
        return "local" if isinstance(self._journal, InMemoryJournal) else "unverifiable"

    @property
    def approval_ttl_us(self) -> int | None:
        """The approval time to live in microseconds (``None``: no limit)."""
        return self._approval_ttl_us

    def now_us(self) -> int:
        """The current time in microseconds, from the configured clock."""
        return self._clock()

    # -- tools ----------------------------------------------------------------------------
    def _admit_tool(self, definition: ToolDefinition) -> None:
        """Refuse, at start-up, a tool with fields to redact on a journal that does not seal:
        with the salts in clear a short value (a card number) is recovered by brute force
        (docs/adr/0019-erasure.md §5)."""
        if definition.redact and not journal_seals(self._journal):
            raise ConfigurationError(
                f"tool {definition.name!r} redacts {', '.join(definition.redact)}: redaction "
                f"needs a key service, so set {KEK_SETTING} (a key from `sagacity keys init`) "
                "for the journal; this journal does not seal data fields"
            )

    def wrap(self, obj: _T) -> _T:
        """Validate ``obj``'s declarations and return its journaling version.

        ``obj`` is an instance whose methods carry ``@compensable`` (a proxy exposing the
        wrapped methods and the object's other attributes is returned) or a ``@compensable``
        function (a wrapped function is returned).  Each tool is registered by name, for
        compensation and resume.  The result is typed as ``obj``'s own type, so a type
        checker checks calls of the wrapped tools as it checks the originals.

        Raises:
            DeclarationError: nothing is declared, a ``by=`` does not resolve or has the
                wrong signature, ``by=`` is given to a READ/IRREVERSIBLE/PRIVILEGED tool, or
                two different tools share a name.
            ConfigurationError: a tool has fields to redact and the journal does not seal
                (no key service: ``SAGACITY_KEY_ENCRYPTION_KEY_FILE``).
        """
        return cast(_T, wrap(self, self._registry, obj))

    def wrap_tool(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        reversibility: Reversibility = Reversibility.COMPENSATABLE,
        by: Callable[..., Any] | None = None,
        constraint: Constraint | None = None,
        undo: UndoCall | None = None,
        redact: Sequence[str] = (),
        undo_tools: Sequence[str] = (),
    ) -> Callable[..., Any]:
        """Declare and wrap an undecorated callable in one step (for framework adapters).

        The same as decorating ``function`` with ``@compensable(...)`` and wrapping it, without
        touching ``function``: a framework's tool function or a bound method can be wrapped
        where it cannot be decorated.  ``by`` is the compensation itself (a callable taking
        one ``CompensationContext``); ``undo`` names another registered tool as the undo, with
        arguments taken from the call and its result (:class:`~sagacity.UndoCall`);
        ``redact`` names payload fields never journaled in clear, and ``undo_tools`` the
        tools its result may name as its undo, as ``@compensable``'s.

        Raises:
            DeclarationError: as :meth:`wrap`.
            ConfigurationError: as :meth:`wrap`.
        """
        return wrap_callable(
            self,
            self._registry,
            function,
            name=name,
            reversibility=reversibility,
            by=by,
            constraint=constraint,
            undo=undo,
            redact=redact,
            undo_tools=undo_tools,
        )

    # -- sagas ----------------------------------------------------------------------------
    def _open(self, saga_id: object) -> str:
        saga = check_saga_id(saga_id)
        ensure_no_active_scope(saga)
        if self._journal.entries(saga):
            raise SagaExistsError(
                f"saga {saga!r} already exists; a saga id names one unit of work (resume a "
                "suspended saga with resume_saga)",
                saga_id=saga,
            )
        self._journal.append(
            self._draft(saga, EventType.SAGA_OPENED, attributes={attr.COMPENSATION: self._mode})
        )
        return saga

    def saga(self, saga_id: str, work: Callable[[], Any]) -> SagaResult:
        """Run ``work`` as a saga: its wrapped tool calls are journaled and, on failure, undone.

        The outcome: ``work`` raised, or a step failed even when the exception was swallowed
        → the executed steps are compensated (``COMPENSATED`` / ``COMPENSATION_FAILED``, or
        ``COMPENSATION_PENDING`` when delegated); a gated call is waiting →
        ``AWAITING_APPROVAL``; else ``COMPLETED``.  ``SAGA_ENDED`` is journaled and the journal
        flushed before returning.  Once a step has failed, further wrapped calls in the run
        raise :class:`~sagacity.errors.SagaFailedError` without running: the saga will be
        compensated, so new side effects would only be undone again.  A ``BaseException``
        that is not an ``Exception`` (``KeyboardInterrupt``…) propagates without
        compensation; the chain shows the run unfinished and :meth:`compensate` finishes it.

        Raises:
            InvalidArgumentError: ``saga_id`` is empty or ``work`` is not callable.
            NestedSagaError: a saga is already active in this context.
            SagaExistsError: the saga id is taken.
            JournalError: the journal could not record the saga.
        """
        if not callable(work):
            raise InvalidArgumentError(f"work must be callable, got {work!r}")
        if _tracing.tracer is not None:
            with _tracing.tracer.saga(str(saga_id)) as span:
                return span.ended(self._saga(saga_id, work))
        return self._saga(saga_id, work)

    def _saga(self, saga_id: str, work: Callable[[], Any]) -> SagaResult:
        saga = self._open(saga_id)
        value: Any = None
        error: Exception | None = None
        with open_scope(saga, self) as scope:
            try:
                value = work()
                if inspect.isawaitable(value):
                    if inspect.iscoroutine(value):
                        value.close()
                    value = None
                    raise InvalidArgumentError(
                        "work returned an awaitable: run async work with saga_async"
                    )
            except Exception as exc:
                error = exc
            except BaseException:
                self._flush_quietly()
                raise
        return self.finish_run(scope, value, error)

    def finish_run(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        """End a run whose scope has closed: compensate after a failure, else journal the end."""
        if scope.lost is not None:
            return self._end_lost(scope, error)
        if self._needs_compensation(scope, error):
            report = None if self._mode == "delegated" else self._runner().run(scope.saga_id)
            return self._end_failed(scope, value, error, report)
        return self._end_clean(scope, value)

    def open_run(self, saga_id: str) -> SagaRun:
        """Open a saga whose calls arrive one at a time (an MCP session, a conversation).

        ``SAGA_OPENED`` is journaled now; each :meth:`SagaRun.call` joins the saga and
        :meth:`SagaRun.end` ends it with the rules of :meth:`saga`.

        Raises:
            InvalidArgumentError: ``saga_id`` is empty.
            NestedSagaError: a saga is already active in this context.
            SagaExistsError: the saga id is taken.
            JournalError: the journal could not record the saga.
        """
        if _tracing.tracer is not None:
            return _tracing.tracer.run_opened(saga_id, lambda: SagaRun(self, self._open(saga_id)))
        return SagaRun(self, self._open(saga_id))

    async def saga_async(self, saga_id: str, work: Callable[[], Awaitable[Any]]) -> SagaResult:
        """:meth:`saga` for asyncio: ``work`` is awaited; tasks it creates share the saga.

        Journal calls that may wait for the store (opening, ending, flushing) run on a worker
        thread so the event loop is never blocked; compensations run on the loop.
        """
        if not callable(work):
            raise InvalidArgumentError(f"work must be callable, got {work!r}")
        if _tracing.tracer is not None:
            with _tracing.tracer.saga(str(saga_id)) as span:
                return span.ended(await self._saga_async(saga_id, work))
        return await self._saga_async(saga_id, work)

    async def _saga_async(self, saga_id: str, work: Callable[[], Awaitable[Any]]) -> SagaResult:
        saga = await asyncio.to_thread(self._open, saga_id)
        value: Any = None
        error: Exception | None = None
        with open_scope(saga, self) as scope:
            try:
                value = work()
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                error = exc
            except BaseException:
                self._flush_quietly()
                raise
        if scope.lost is not None:
            return await asyncio.to_thread(self._end_lost, scope, error)
        if self._needs_compensation(scope, error):
            report = None if self._mode == "delegated" else await self._runner().run_async(saga)
            return await asyncio.to_thread(self._end_failed, scope, value, error, report)
        return await asyncio.to_thread(self._end_clean, scope, value)

    def conversation(self, conversation_id: str) -> SagaRun:
        """The one saga of a conversation, opened by the first call for its id.

        The same :class:`SagaRun` is returned for the same id until it ends: each agent run
        of the conversation joins it (``conversation.call(...)``, or an agent-level hook in
        conversation mode) instead of opening a saga of its own.  End it explicitly with
        ``conversation.end()`` when the conversation is over; that is when a failed step is
        compensated.  Its saga id is the conversation id.

        Raises:
            InvalidArgumentError: an empty ``conversation_id``.
            SagaExistsError: the id names a saga this ``Sagacity`` did not open (one that
                ended, or another writer's).
            JournalError: the journal could not record the saga.
        """
        saga = check_saga_id(conversation_id)
        with self._conversations_lock:
            run = self._conversations.get(saga)
            if run is None or run.ended:
                run = self.open_run(saga)
                self._conversations[saga] = run
            return run

    def _flush_quietly(self) -> None:
        # On the way out of an interrupted run: make buffered outcomes durable if the journal
        # can, without masking the interruption itself.
        with contextlib.suppress(Exception):
            self._journal.flush()

    def _end_lost(self, scope: SagaScope, error: Exception | None) -> SagaResult:
        # Another writer took the saga over (docs/adr/0011-writer-lease.md): its hand-off
        # decides what happens next; this run journals nothing more, not even its end.
        self._flush_quietly()
        return SagaResult(
            status=SagaStatus.COMPENSATION_PENDING,
            saga_id=scope.saga_id,
            error=f"taken over by another writer: {scope.lost}",
            exception=error,
        )

    @staticmethod
    def _needs_compensation(scope: SagaScope, error: Exception | None) -> bool:
        return error is not None or scope.failure is not None

    def _end_clean(self, scope: SagaScope, value: Any) -> SagaResult:
        gates = scope.gates
        status = SagaStatus.AWAITING_APPROVAL if gates else SagaStatus.COMPLETED
        self._journal.append(self._draft(scope.saga_id, EventType.SAGA_ENDED, result=status))
        self._journal.flush()
        return SagaResult(
            status=status,
            saga_id=scope.saga_id,
            value=value,
            awaiting_tool_name=gates[0].tool if gates else None,
            awaiting_seq=gates[0].seq if gates else None,
        )

    def _end_failed(
        self,
        scope: SagaScope,
        value: Any,
        error: Exception | None,
        report: CompensationReport | None,
    ) -> SagaResult:
        failure = scope.failure
        text = describe_error(error) if error is not None else (failure.error if failure else "")
        ref = failure.seq if failure is not None else None
        return self.end_saga(
            scope.saga_id,
            cause=EventType.FAILED,
            ref_seq=ref,
            error=text,
            clean_status=SagaStatus.COMPENSATED,
            report=report,
            value=value,
            exception=error,
            redacted=scope.redacted,
        )

    # -- ending a saga (shared with the gate decisions) -----------------------------------
    def _runner(
        self, invoke: Callable[[CompensationCall], Any] | None = None
    ) -> CompensationRunner:
        return CompensationRunner(
            self._journal,
            self._registry,
            actor=self._writer_id,
            clock=self._clock,
            invoke=invoke,
            settlement_counts=self._desk.settlement_counts,
        )

    def _draft(self, saga_id: str, event: EventType, **fields: Any) -> EntryDraft:
        fields.setdefault("actor", self._writer_id)
        return EntryDraft(saga_id=saga_id, event_type=event, recorded_at_us=self._clock(), **fields)

    def end_saga(
        self,
        saga_id: str,
        *,
        cause: EventType,
        ref_seq: int | None,
        error: str | None,
        clean_status: SagaStatus,
        report: CompensationReport | None,
        value: Any = None,
        exception: BaseException | None = None,
        redacted: Collection[str] = (),
    ) -> SagaResult:
        """Finish a saga that must be undone: journal the request or the compensation's end.

        ``report`` is the inline compensation's outcome (``None`` in delegated mode, where
        ``COMPENSATION_REQUESTED`` is journaled instead).  Journals ``SAGA_ENDED`` and flushes.
        ``redacted``: texts of the values the run redacted, masked in what is journaled.
        """
        if report is None:
            attributes = {attr.REASON: cause.value}
            if ref_seq is not None:
                attributes[attr.REF_SEQ] = str(ref_seq)
            append_bounded(
                self._journal,
                self._draft(
                    saga_id, EventType.COMPENSATION_REQUESTED, error=error, attributes=attributes
                ),
                durable=True,
                redacted=redacted,
            )
            status = SagaStatus.COMPENSATION_PENDING
        else:
            status = clean_status if report.status is SagaStatus.COMPENSATED else report.status
        ended: dict[str, str] = {}
        if report is not None and (report.dirty or report.suspects):
            ended[attr.DIRTY] = "; ".join(
                [f"seq {s.seq} {s.tool}: {s.reason}" for s in report.dirty]
                + [f"seq {s.seq} {s.tool}: suspect: {s.reason}" for s in report.suspects]
            )
        append_bounded(
            self._journal,
            self._draft(
                saga_id, EventType.SAGA_ENDED, result=status.value, error=error, attributes=ended
            ),
            durable=True,
            redacted=redacted,
        )
        self._journal.flush()
        return SagaResult(
            status=status,
            saga_id=saga_id,
            value=value,
            error=error,
            exception=exception,
            compensated=report.compensated if report else (),
            dirty=report.dirty if report else (),
            suspects=report.suspects if report else (),
        )

    def compensate(
        self,
        saga_id: str,
        *,
        reason: EventType = EventType.FAILED,
        error: str | None = None,
        invoke: Callable[[CompensationCall], Any] | None = None,
    ) -> SagaResult:
        """Run compensation for ``saga_id`` from its chain and end it (``SAGA_ENDED``).

        What the compensation service calls on ``COMPENSATION_REQUESTED``, and what a person
        runs to finish a saga interrupted mid-way.  Safe to repeat: steps already compensated
        are skipped.  When anything is left dirty, ``SAGA_ENDED`` names it in its ``dirty``
        attribute.

        Args:
            reason: the event that made compensation necessary (``REJECTED`` / ``EXPIRED``
                end a clean compensation with that status).
            error: the failure that caused it, recorded on ``SAGA_ENDED``.
            invoke: makes each undo call (see :class:`CompensationRunner`); a service passes
                one that adds a timeout or an idempotency claim.

        Raises:
            UnknownSagaError: the saga has no entries.
            ChainIntegrityError: the chain does not verify.
            CompensationConflictError: the saga is being compensated elsewhere right now.
        """
        entries = _approval.load_chain(self._journal, saga_id)
        report = self._runner(invoke).run(saga_id, entries)
        clean = {
            EventType.REJECTED: SagaStatus.REJECTED,
            EventType.EXPIRED: SagaStatus.EXPIRED,
        }.get(reason, SagaStatus.COMPENSATED)
        return self.end_saga(
            saga_id, cause=reason, ref_seq=None, error=error, clean_status=clean, report=report
        )

    def outcome(self, saga_id: str) -> SagaResult | None:
        """The saga's outcome as its chain records it (``None`` while no run has ended).

        Raises:
            UnknownSagaError: the saga has no entries.
        """
        return outcome_from_chain(_approval.load_chain(self._journal, saga_id))

    def wait_for_outcome(
        self, saga_id: str, *, timeout: float = 30.0, poll_interval: float = 0.05
    ) -> SagaResult:
        """Wait until the saga's outcome is final (not ``COMPENSATION_PENDING``) and return it.

        For callers in delegated mode: the compensation service journals the end.

        Raises:
            OutcomeTimeoutError: still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self._final_outcome(saga_id)
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise self._outcome_timeout(saga_id, timeout)
            time.sleep(poll_interval)

    async def wait_for_outcome_async(
        self, saga_id: str, *, timeout: float = 30.0, poll_interval: float = 0.05
    ) -> SagaResult:
        """:meth:`wait_for_outcome` without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while True:
            result = self._final_outcome(saga_id)
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise self._outcome_timeout(saga_id, timeout)
            await asyncio.sleep(poll_interval)

    def _final_outcome(self, saga_id: str) -> SagaResult | None:
        entries = self._journal.entries(saga_id)
        result = outcome_from_chain(entries) if entries else None
        if result is None or result.status is SagaStatus.COMPENSATION_PENDING:
            return None
        return result

    @staticmethod
    def _outcome_timeout(saga_id: str, timeout: float) -> OutcomeTimeoutError:
        return OutcomeTimeoutError(
            f"saga {saga_id!r} has no final outcome after {timeout:g}s", saga_id=saga_id
        )

    def compensation_report(self, saga_id: str) -> CompensationReport:
        """Run the compensation runner only (no ``SAGA_ENDED``); for services and tests."""
        return self._runner().run(saga_id)

    # -- approval gates -------------------------------------------------------------------
    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Open approval requests (of one saga, or of all)."""
        return self._journal.pending_approvals(saga_id)

    def approve(
        self, saga_id: str, seq: int, approver: str, *, request_hash: str | None = None
    ) -> ApprovalRequest:
        """Journal ``APPROVED`` by ``approver`` for the request at ``seq``; nothing runs yet.

        Returns the request with its signatures so far (``request.approved`` says whether
        enough distinct approvers have signed: one for IRREVERSIBLE, two for PRIVILEGED).
        The approval names the request entry's hash and the journal (signed, where this
        Sagacity signs decisions).

        Args:
            request_hash: the hash of the request the approver was shown
                (:attr:`ApprovalRequest.entry_hash`); when it is not the chain's request at
                ``seq``, the approval is refused and ``APPROVAL_REFUSED`` journaled.

        Raises:
            RequestChangedError: ``request_hash`` is not the chain's request (journaled).
            UnderDeclaredRequestError: the request claims fewer signatures than this
                Sagacity's declaration of its tool requires (journaled).
            InvalidArgumentError: an empty approver, a bad seq.
            UnknownSagaError / ApprovalNotFound: no such saga / no request at ``seq``.
            AlreadyDecidedError: the request is closed, fully signed, or ``approver`` signed
                it already (``"<approver> already signed this request"``).
            ApprovalExpiredError: the request's time to live has passed (journaled ``EXPIRED``
                and the saga compensated; the result is on the error).
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._desk.approve(saga_id, seq, approver, request_hash=request_hash)

    def counted_signers(
        self, entries: Sequence[JournalEntry], request: ApprovalRequest
    ) -> set[str]:
        """The approvers of ``request`` (on the chain ``entries``) whose ``APPROVED`` counts
        under :attr:`approval_trust`: verified ones with a pinned key, every one in local
        mode, none when approvals cannot be verified."""
        return self._desk.signers(entries, request)

    def reject(
        self, saga_id: str, seq: int, approver: str, *, reason: str | None = None
    ) -> SagaResult:
        """Journal ``REJECTED`` by ``approver``, close the request and undo the executed steps.

        Raises: as :meth:`approve` (a closed request raises ``AlreadyDecidedError``).
        """
        return self._desk.reject(saga_id, seq, approver, reason=reason)

    def resume_saga(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """Run the approved call at ``seq`` with ``payload``, if and only if it was approved.

        Fails closed: the request must be pending, approved in the journal by enough distinct
        people, unexpired, allowed by its policy constraint, and ``payload`` must be
        byte-identical to the approved one (SHA-256).  Then ``INTENT`` and ``EXECUTED`` (or
        ``FAILED``, which compensates) are journaled.  The saga completes unless another
        request is still open.  ``requested_by`` (who asked for the resume, e.g. the
        authenticated principal) is journaled on the ``INTENT`` or on the refusal.

        A resume of the request that stopped after the call's ``INTENT`` and before the saga's
        end (its process died) is finished instead, and the tool is never called again: with
        the call's ``EXECUTED`` (or ``FAILED``) on the chain the saga is ended as that resume
        would have ended it; without an outcome the step is journaled ``SUSPECT``, the saga
        compensated (or handed to compensation) and
        :class:`~sagacity.errors.StepInDoubtError` raised.

        Raises:
            InvalidArgumentError: ``payload`` is not a str, or a bad seq.
            UnknownSagaError: no such saga.
            ApprovalNotFound: no pending request at ``seq``.
            ApprovalMissingError: ``"no human approval recorded"`` (or too few signatures).
            PayloadMismatchError: ``"payload changed since approval"``: journaled
                ``RESUME_REFUSED``, prior steps compensated, the tool never called.
            UnverifiableApprovalError: the request records no usable payload hash (same).
            ConstraintViolation: the policy refuses the call (journaled, compensated).
            ApprovalExpiredError: the request lapsed (journaled ``EXPIRED``, compensated).
            ChainIntegrityError: the saga's chain does not verify.
            StepInDoubtError: an interrupted resume left the call without an outcome.
        """
        return self._resumer.resume(saga_id, seq, payload, requested_by=requested_by)

    async def resume_saga_async(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """:meth:`resume_saga` for asyncio (async tools and compensations are awaited)."""
        return await self._resumer.resume_async(saga_id, seq, payload, requested_by=requested_by)

    def expire(self, saga_id: str, seq: int, *, seen_at_us: int | None = None) -> SagaResult:
        """Journal ``EXPIRED`` for the request at ``seq`` if it is past its time to live.

        The request lapses at its own ``expires_at_us`` or, when this Sagacity has an
        ``approval_ttl``, that long after the earlier of its recorded time and when it was
        first seen (``seen_at_us``, a request store's record; else when this process first
        read it), whichever is earlier (:func:`sagacity._requests.deadline_us`).  The saga is
        then compensated (or ``COMPENSATION_REQUESTED`` journaled, when delegated) and ended.

        Raises:
            UnknownSagaError / ApprovalNotFound: no such saga / no request at ``seq``.
            AlreadyDecidedError: the request is already closed.
            InvalidArgumentError: the request has not lapsed yet.
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._desk.expire(saga_id, seq, seen_at_us=seen_at_us)

    def approval_deadline_us(
        self, request: ApprovalRequest, *, seen_at_us: int | None = None
    ) -> int | None:
        """When ``request`` lapses for this Sagacity (``None``: never); see :meth:`expire`."""
        return self._desk.deadline_us(request, seen_at_us=seen_at_us)

    def expire_overdue(self) -> list[SagaResult]:
        """Expire every pending request past its time to live; returns each saga's result."""
        return self._desk.expire_overdue()

    # -- suspect steps --------------------------------------------------------------------
    def settle(self, saga_id: str, seq: int, outcome: str, person: str, *, note: str) -> SagaResult:
        """Journal a person's word on the suspect step at ``seq`` and finish the saga again.

        ``outcome`` says whether the call in doubt took effect: ``executed`` (a call's effect
        is then undone, exactly once; an undo in doubt counts as done), ``not-executed``
        (nothing to undo; an undo in doubt is called again) or ``fixed-by-hand`` (recorded).
        ``SUSPECT_SETTLED`` (actor = ``person``, with ``note``) is appended, then the saga is
        compensated from its chain (delegated: ``COMPENSATION_REQUESTED``) and ended, so it
        ends ``COMPENSATED`` once nothing is dirty.  See ``sagacity._settlement``.

        Raises:
            InvalidArgumentError: an unknown outcome, an empty person or note, a bad seq.
            UnknownSagaError / ApprovalNotFound: no such saga / no suspect step at ``seq``.
            AlreadyDecidedError: the step is settled already (the message says by whom).
            DecisionInProgressError: the saga is being compensated right now.
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._suspects.settle(saga_id, seq, outcome, person, note=note)

    def settlement_counts(self, entry: JournalEntry) -> bool:
        """Whether the ``SUSPECT_SETTLED`` ``entry`` may be acted on under this Sagacity's
        trust (:attr:`approval_trust`): verified against a pinned approvals key, every one in
        local mode, none when decisions cannot be verified (docs/adr/0014)."""
        return self._desk.settlement_counts(entry)

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's chain in seq order (a shortcut for ``journal.entries``)."""
        return self._journal.entries(saga_id)

    def __repr__(self) -> str:
        return (
            f"Sagacity(journal={type(self._journal).__name__}, compensation={self._mode!r}, "
            f"tools={list(self._registry.names())})"
        )
