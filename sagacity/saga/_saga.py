"""``Sagacity``: the facade an application holds: wrap tools, run sagas, decide gates."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast

from sagacity.effects._effect_keys import DEFAULT_KEY
from sagacity.effects._effects import EffectIndex
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry, now_micros
from sagacity.entries._memory import InMemoryJournal
from sagacity.errors import (
    ConfigurationError,
    InvalidArgumentError,
    SagaCancelledError,
    SagaExistsError,
)
from sagacity.gate import _approval, _resume, _settlement
from sagacity.gate._approver_groups import ApproverGroups
from sagacity.gate._grant_desk import GrantDecisions
from sagacity.journal import Journal, journal_seals
from sagacity.privacy._envelope import KEK_SETTING
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.saga._run import SagaRun
from sagacity.saga._saga_ends import SagaEnds
from sagacity.saga._saga_gates import GateDecisions
from sagacity.saga._scope import SagaScope, ensure_no_active_scope, open_scope
from sagacity.signing._decision_signature import DecisionSigner, DecisionVerifier, verifier_from_env
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.signing._operator_signature import verifier_from_env as operator_verifier_from_env
from sagacity.signing._writer_roles import SagaWriters
from sagacity.telemetry import _tracing
from sagacity.tools._codec import describe_error
from sagacity.tools._decorators import Constraint, ToolDefinition
from sagacity.tools._registry import ToolRegistry
from sagacity.tools._reversibility import Reversibility
from sagacity.tools._wrap import wrap, wrap_callable
from sagacity.undo._compensation import CompensationReport
from sagacity.undo._undo import UndoCall

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


class Sagacity(SagaEnds, GateDecisions, GrantDecisions):
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
        approver_groups: the deciding service's declaration of who counts toward which
            tool's requests ("two of finance", :mod:`sagacity.gate._approver_groups`).
        operator_public_key: the pinned operator key(s) a deadline extension must verify
            against to count (docs/operations/routing.md; ``None``: none counts).

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
        approver_groups: ApproverGroups | None = None,
        operator_public_key: OperatorVerifier | None = None,
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
        self.approver_groups = approver_groups
        self.operator_verifier = operator_public_key
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
        if options.get("operator_public_key") is None:
            # A deadline extension counts here as in the approvals service (routing.md).
            options["operator_public_key"] = operator_verifier_from_env()
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
        effect_key: Sequence[str] | object | None = DEFAULT_KEY,
        refuses: Sequence[type[BaseException]] = (),
        grantable: bool = True,
    ) -> Callable[..., Any]:
        """Declare and wrap an undecorated callable in one step (for framework adapters).

        The same as decorating ``function`` with ``@compensable(...)`` and wrapping it, without
        touching ``function``: a framework's tool function or a bound method can be wrapped
        where it cannot be decorated.  ``by`` is the compensation itself (a callable taking
        one ``CompensationContext``); ``undo`` names another registered tool as the undo, with
        arguments taken from the call and its result (:class:`~sagacity.UndoCall`);
        ``redact`` names payload fields never journaled in clear, ``undo_tools`` the tools its
        result may name as its undo, ``effect_key`` the fields naming its effect and
        ``refuses`` its refusals before acting and ``grantable`` whether it may be granted,
        as ``@compensable``'s.

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
            effect_key=effect_key,
            refuses=refuses,
            grantable=grantable,
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
        cancelled: asyncio.CancelledError | None = None
        with open_scope(saga, self) as scope:
            try:
                value = work()
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                error = exc
            except asyncio.CancelledError as exc:
                cancelled, error = exc, SagaCancelledError(f"saga {saga!r}: its run was cancelled")
            except BaseException:
                self._flush_quietly()
                raise
        if cancelled is None:
            return await self._finish_async(scope, value, error)
        # Shielded: a second cancellation does not cut the compensation short.
        await asyncio.shield(self._finish_async(scope, value, error))
        raise cancelled

    async def _finish_async(
        self, scope: SagaScope, value: Any, error: Exception | None
    ) -> SagaResult:
        if scope.lost is not None:
            return await asyncio.to_thread(self._end_lost, scope, error)
        if self._needs_compensation(scope, error):
            delegated = self._mode == "delegated"
            report = None if delegated else await self._runner().run_async(scope.saga_id)
            return await asyncio.to_thread(self._end_failed, scope, value, error, report)
        return await asyncio.to_thread(self._end_clean, scope, value)

    def conversation(self, conversation_id: str) -> SagaRun:
        """The one saga of a conversation, opened by the first call for its id.

        The same :class:`SagaRun` is returned for the same id until it ends: each agent run
        of the conversation joins it (``conversation.call(...)``, or an agent-level hook in
        conversation mode) instead of opening a saga of its own.  End it explicitly with
        ``conversation.end()`` when the conversation is over; that is when a failed step is
        compensated.  Its saga id is the conversation id.

        A conversation whose saga this writer (``writer_id``) still holds on the journal, such
        as one a restarted process comes back to, is continued: its calls' effects are read
        from its chain once, so a call the framework replays does not run twice, and a call
        whose ``INTENT`` has no outcome is in doubt (docs/adr/0026-effects-and-refusals.md).

        Raises:
            InvalidArgumentError: an empty ``conversation_id``.
            SagaExistsError: the id names a saga this ``Sagacity`` does not hold (one that
                ended, or another writer's).
            JournalError: the journal could not record the saga.
        """
        saga = check_saga_id(conversation_id)
        with self._conversations_lock:
            run = self._conversations.get(saga)
            if run is None or run.ended:
                run = self._continued(saga) or self.open_run(saga)
                self._conversations[saga] = run
            return run

    def _continued(self, saga_id: str) -> SagaRun | None:
        """A run continuing ``saga_id`` if this writer holds it live on the chain (``None``:
        no such saga; opening it refuses one held by another or ended)."""
        entries = self._journal.entries(saga_id)
        if not entries or SagaWriters.of(entries).live != self._writer_id:
            return None
        return SagaRun(self, saga_id, effects=EffectIndex.from_chain(entries, self._registry))

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

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's chain in seq order (a shortcut for ``journal.entries``)."""
        return self._journal.entries(saga_id)

    def __repr__(self) -> str:
        return (
            f"Sagacity(journal={type(self._journal).__name__}, compensation={self._mode!r}, "
            f"tools={list(self._registry.names())})"
        )
