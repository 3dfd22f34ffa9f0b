"""What every agent-level hook shares: declare each tool an agent can reach, journal each call.

A framework hook (a Pydantic AI capability, a LangChain middleware, a journaled OpenAI agent)
sees every tool call of an agent, whatever registered the tool.  :class:`AgentHook` decides
each tool's declaration (its own ``@compensable``, else the :class:`~sagacity.policy.Policy`,
else its MCP annotations, else the policy's default, else the tool is refused by name),
registers it for resume and compensation, runs each call through the core's hot path, and
words what the model is told (:class:`ModelLines`) when a gate stops a call or the saga will
be compensated.
"""

from __future__ import annotations

import functools
import inspect
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from sagacity.adapters._binding import check_sagacity, register_function
from sagacity.effects._effect_calls import LINES, Notice
from sagacity.effects._refusals import Refusals
from sagacity.errors import DeclarationError, SagaFailedError
from sagacity.policy import Policy, ToolAnnotations
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.saga._run import SagaRun
from sagacity.saga._saga import Sagacity
from sagacity.saga._scope import SagaScope, current_scope
from sagacity.telemetry._tracing import calling_tool
from sagacity.tools._decorators import ToolDefinition, tool_definition
from sagacity.tools._registry import RegisteredTool
from sagacity.tools._tool import WRAPPED_ATTR, journaled_call, journaled_call_async
from sagacity.tools._wrap import _resolve_by
from sagacity.undo._undo import UndoCall


@dataclass(frozen=True, kw_only=True)
class ModelLines:
    """The one line the model receives as a tool's result when Sagacity stops or undoes.

    Each is a ``str.format`` template.  Fields: ``{tool}``, ``{saga_id}``; ``{seq}`` (the
    approval request's) for ``gate``; ``{error}`` (the tool's failure) and ``{undone}`` (the
    steps the saga will undo, or ``nothing_undone``) for ``compensation``; ``{failed}`` (the
    tool whose failure is not recovered) for ``refused``; ``{seq}`` (the earlier call) and
    ``{key}`` (the effect key's fields) for ``replayed``, ``conflict``, ``in_progress`` and
    ``in_doubt`` (docs/adr/0026-effects-and-refusals.md: a replayed call's recorded result
    follows its line); ``{seq}`` (the request's) for ``expired`` and ``rejected``
    (:meth:`decided`).  ``gate`` should keep its ``[AWAITING_APPROVAL]`` prefix for
    ``stop_at_approval`` to recognise it.
    """

    gate: str = (
        "[AWAITING_APPROVAL] Tool '{tool}' requires human approval; it has not run "
        "(saga {saga_id}, request {seq})."
    )
    compensation: str = (
        "[FAILED] Tool '{tool}' failed ({error}); unless a retry of it succeeds, saga "
        "{saga_id} is rolled back when it ends, undoing: {undone}. Do not report success."
    )
    refused: str = (
        "[SAGA_FAILED] Tool '{tool}' was not called: saga {saga_id} has a failed step "
        "('{failed}') and is rolled back unless a retry of it succeeds. Do not report success."
    )
    refusal: str = LINES["refusal"]
    replayed: str = LINES["replayed"]
    conflict: str = LINES["conflict"]
    in_progress: str = LINES["in_progress"]
    in_doubt: str = LINES["in_doubt"]
    nothing_undone: str = "nothing"
    expired: str = (
        "[EXPIRED] Tool '{tool}' did not run: nobody decided its approval request before the "
        "deadline (saga {saga_id}, request {seq}); it expired, it was not denied. Do not "
        "report success."
    )
    rejected: str = (
        "[REJECTED] Tool '{tool}' did not run: its approval request was rejected (saga "
        "{saga_id}, request {seq}). Do not report success."
    )

    def __post_init__(self) -> None:
        for name in (
            "gate",
            "compensation",
            "refused",
            "refusal",
            "replayed",
            "conflict",
            "in_progress",
            "in_doubt",
            "nothing_undone",
            "expired",
            "rejected",
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or "\n" in value:
                raise DeclarationError(f"ModelLines.{name} must be one line of text, got {value!r}")

    def decided(self, result: SagaResult, *, tool: str, seq: int) -> str | None:
        """The line telling the model how its approval request at ``seq`` ended, from the
        saga's outcome: ``expired`` for an ``EXPIRED`` saga (never "denied" nor "pending"),
        ``rejected`` for a ``REJECTED`` one; ``None`` for any other outcome."""
        template = {SagaStatus.EXPIRED: self.expired, SagaStatus.REJECTED: self.rejected}.get(
            result.status
        )
        return (
            None
            if template is None
            else template.format(tool=tool, saga_id=result.saga_id, seq=seq)
        )


def _jsonable(arguments: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in arguments.items():
        try:
            result[key] = to_jsonable_python(value)
        except PydanticSerializationError:
            result[key] = value
    return result


_IDENTITIES: dict[tuple[str, str], Callable[..., Any]] = {}
_IDENTITIES_LOCK = threading.Lock()


def remote_identity(source: str, name: str) -> Callable[..., Any]:
    """The function standing for remote tool ``name`` of ``source`` (an MCP server's name) in
    a registry: the same for every hook, so wrapping an agent twice is no name clash."""
    with _IDENTITIES_LOCK:
        identity = _IDENTITIES.get((source, name))
        if identity is None:

            def remote(**arguments: Any) -> Any:
                raise DeclarationError(f"tool {name!r} of {source} runs only through its server")

            remote.__qualname__ = f"{source}:{name}"
            identity = _IDENTITIES[(source, name)] = remote
        return identity


class AgentHook:
    """Declarations and journaling for every tool of one agent (shared by the frameworks).

    Args:
        sagacity: the ``Sagacity`` whose sagas journal the calls.
        policy: declares tools without ``@compensable`` (``None``: only declared tools).
        lines: what the model is told.
        saga_id: makes the id of the saga each run opens when none is active (default
            ``run-<hex>``).
        refuses: the framework's signals that a tool refused a call before acting ("fix
            your arguments and call again"): journaled as refusals, not failures.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        policy: Policy | None,
        *,
        lines: ModelLines | None,
        saga_id: Callable[[], str] | None,
        refuses: Refusals = (),
    ) -> None:
        self.sagacity = check_sagacity(sagacity)
        if policy is not None and not isinstance(policy, Policy):
            raise DeclarationError(f"policy must be a sagacity.policy.Policy, got {policy!r}")
        if lines is not None and not isinstance(lines, ModelLines):
            raise DeclarationError(f"lines must be a ModelLines, got {lines!r}")
        if saga_id is not None and not callable(saga_id):
            raise DeclarationError(f"saga_id must be callable, got {saga_id!r}")
        self.policy = policy or Policy()
        self.lines = lines or ModelLines()
        self.refuses = refuses
        self._saga_id = saga_id
        self._lock = threading.Lock()
        self._definitions: dict[str, ToolDefinition] = {}
        self._undoable: weakref.WeakKeyDictionary[SagaScope, list[str]] = (
            weakref.WeakKeyDictionary()
        )
        self._warned = False

    # -- declarations ---------------------------------------------------------------------
    def definition(self, name: str) -> ToolDefinition | None:
        """The declaration of the tool the framework calls ``name``, once declared."""
        with self._lock:
            return self._definitions.get(name)

    def declare_function(
        self,
        name: str,
        function: Callable[..., Any],
        *,
        payload_parameters: Collection[str],
    ) -> ToolDefinition | None:
        """Declare and register a function tool (``None``: nothing covers it).

        Raises:
            DeclarationError: a tool declared both by ``@compensable`` and by the policy's
                exact name, a wrong ``by=``, a gated tool needing framework parameters.
        """
        known = self.definition(name)
        if known is not None:
            return known
        decorated = tool_definition(function)
        if decorated is not None:
            if self.policy.names_exactly(name):
                raise DeclarationError(
                    f"tool {name!r} is declared twice: its function carries @compensable and "
                    "the policy names it; keep one"
                )
            definition = decorated
        else:
            resolution = self.policy.resolve(name)
            if resolution is None:
                return None
            rule = resolution.rule
            definition = ToolDefinition(
                name=name,
                reversibility=rule.reversibility,
                by=rule.by,
                constraint=rule.constraint,
                function=function,
                undo_call=rule.undo if isinstance(rule.undo, UndoCall) else None,
                undo_tools=rule.undo_tools,
                is_async=inspect.iscoroutinefunction(function),
                redact=rule.redact,
                effect_key=rule.effect_key,
                refuses=rule.refuses,
                grantable=rule.grantable,
            )
        register_function(
            self.sagacity,
            function,
            definition,
            payload_parameters=payload_parameters,
            marked=decorated is not None,
        )
        with self._lock:
            self._definitions[name] = definition
        return definition

    def declare_remote(
        self,
        name: str,
        call: Callable[..., Awaitable[Any]],
        *,
        annotations: ToolAnnotations | None,
        identity: Callable[..., Any],
    ) -> ToolDefinition | None:
        """Declare and register a tool with no Python function of its own (an MCP tool).

        ``call(**arguments)`` makes the call outside the agent run (resume, a returned undo);
        ``identity`` is a function standing for the tool in the registry (stable for one
        server and tool name).  ``None``: nothing covers it.

        Raises:
            DeclarationError: a wrong ``by=``, or a name another tool uses.
        """
        known = self.definition(name)
        if known is not None:
            return known
        resolution = self.policy.resolve(name, annotations)
        if resolution is None:
            return None
        rule = resolution.rule
        definition = ToolDefinition(
            name=name,
            reversibility=rule.reversibility,
            by=rule.by,
            constraint=rule.constraint,
            function=identity,
            undo_call=rule.undo if isinstance(rule.undo, UndoCall) else None,
            undo_tools=rule.undo_tools,
            is_async=True,
            redact=rule.redact,
            effect_key=rule.effect_key,
            refuses=rule.refuses,
            grantable=rule.grantable,
        )
        compensation, compensation_definition = _resolve_by(definition, None, marked=False)
        self.sagacity.registry.register(
            RegisteredTool(
                name=name,
                definition=definition,
                function=call,
                wrapped=call,
                compensation=compensation,
                compensation_definition=compensation_definition,
            )
        )
        with self._lock:
            self._definitions[name] = definition
        return definition

    @staticmethod
    def refuse_uncovered(uncovered: Iterable[str], *, where: str) -> None:
        """Raise naming every tool nothing covers (nothing when all are covered).

        Raises:
            DeclarationError: some tool is uncovered.
        """
        names = sorted(set(uncovered))
        if names:
            raise DeclarationError(
                f"{where}: no declaration for tool(s) {', '.join(repr(n) for n in names)}: "
                "decorate each with @compensable(...), or cover it in the policy (by name, "
                "by a glob, or with a default)"
            )

    def warn_unmatched(self, tools: Iterable[str], *, where: str) -> None:
        """Warn once if the policy names tools the agent does not have."""
        if self._warned:
            return
        self._warned = True
        self.policy.warn_unmatched(tools, where=where, stacklevel=4)

    # -- sagas ----------------------------------------------------------------------------
    def new_run(self) -> SagaRun | None:
        """Open the saga of an agent run starting now (``None``: a saga is already active,
        such as ``sagacity.saga(...)`` or a conversation's, and the run joins it).

        Raises:
            SagaExistsError: the id made by ``saga_id`` is taken.
            JournalError: the journal could not record the saga.
        """
        active = current_scope()
        if active is not None and not active.closed:
            return None
        saga = self._saga_id() if self._saga_id is not None else f"run-{uuid.uuid4().hex}"
        return self.sagacity.open_run(saga)

    # -- calls ----------------------------------------------------------------------------
    def _before(self) -> tuple[SagaScope | None, int]:
        scope = current_scope()
        return scope, len(scope.gates) if scope is not None else 0

    def _after(
        self, definition: ToolDefinition, scope: SagaScope | None, gates: int, value: Any
    ) -> Any:
        if scope is None:
            return value
        now = scope.gates
        if len(now) > gates:
            gate = now[-1]
            return self.lines.gate.format(tool=gate.tool, saga_id=scope.saga_id, seq=gate.seq)
        if isinstance(value, Notice):
            return self.told(value)
        if definition.reversibility.undoable:
            with self._lock:
                self._undoable.setdefault(scope, []).append(definition.name)
        return value

    def compensation_line(
        self, definition: ToolDefinition, error: BaseException | str
    ) -> str | None:
        """The line telling the model the saga will be undone (``None`` outside a saga)."""
        scope = current_scope()
        if scope is None:
            return None
        with self._lock:
            undone = list(self._undoable.get(scope, []))
        text = error if isinstance(error, str) else (str(error) or type(error).__name__)
        return self.lines.compensation.format(
            tool=definition.name,
            saga_id=scope.saga_id,
            error=text,
            undone=", ".join(reversed(undone)) or self.lines.nothing_undone,
        )

    def refused_line(
        self, definition: ToolDefinition, error: SagaFailedError | str, failed: str | None = None
    ) -> str:
        """The line telling the model a call was refused because the saga has a failed step
        (``error``: the refusal, or the saga id; ``failed``: the failed tool, when known)."""
        saga = error if isinstance(error, str) else error.saga_id
        scope = current_scope()
        failure = scope.failure if scope is not None else None
        name = failed or (failure.tool if failure is not None else None) or "?"
        return self.lines.refused.format(tool=definition.name, saga_id=saga, failed=name)

    def refusal_line(self, definition: ToolDefinition) -> str:
        """The line telling the model the tool refused before acting: nothing to undo."""
        scope = current_scope()
        saga = scope.saga_id if scope is not None else ""
        return self.lines.refusal.format(tool=definition.name, saga_id=saga)

    def told(self, notice: Notice) -> Notice:
        """A call that did not run, in this hook's words (a replay with its result)."""
        template = getattr(self.lines, notice.kind, None)
        if not isinstance(template, str) or notice.kind == "gate":
            return notice.told()
        return notice.told(template.format(**notice.fields))

    def stand_in(
        self,
        definition: ToolDefinition,
        function: Callable[..., Any],
        payload_parameters: Collection[str],
    ) -> Callable[..., Any]:
        """A function with ``function``'s signature whose calls go through :meth:`call`
        (the gate line returned instead of running, failures journaled then re-raised)."""
        signature = inspect.signature(function)
        names = frozenset(payload_parameters)

        def arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
            bound = signature.bind_partial(*args, **kwargs).arguments
            return {k: v for k, v in bound.items() if k in names}

        stand_in: Callable[..., Any]
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def stand_in_async(*args: Any, **kwargs: Any) -> Any:
                return await self.call_async(
                    definition, arguments(args, kwargs), lambda: function(*args, **kwargs)
                )

            stand_in = stand_in_async
        else:

            @functools.wraps(function)
            def stand_in_sync(*args: Any, **kwargs: Any) -> Any:
                return self.call(
                    definition, arguments(args, kwargs), lambda: function(*args, **kwargs)
                )

            stand_in = stand_in_sync
        setattr(stand_in, WRAPPED_ATTR, True)
        return stand_in

    def call(
        self,
        definition: ToolDefinition,
        arguments: Mapping[str, Any],
        run: Callable[[], Any],
        *,
        call_id: str | None = None,
    ) -> Any:
        """One journaled call (sync): the result, or the gate line instead of running.

        ``call_id`` is the framework's id of the call (the span's ``gen_ai.tool.call.id``).

        Raises:
            whatever the tool raises (journaled ``FAILED`` first), ``SagaFailedError`` when
            the saga already failed (nothing journaled, nothing run).
        """
        scope, gates = self._before()
        with calling_tool(call_id):
            value = journaled_call(
                self.sagacity,
                definition,
                lambda: _jsonable(arguments),
                run,
                refuses=self.refuses,
                told=True,
            )
        return self._after(definition, scope, gates, value)

    async def call_async(
        self,
        definition: ToolDefinition,
        arguments: Mapping[str, Any],
        run: Callable[[], Awaitable[Any]],
        *,
        call_id: str | None = None,
    ) -> Any:
        """:meth:`call` for asyncio."""
        scope, gates = self._before()
        with calling_tool(call_id):
            value = await journaled_call_async(
                self.sagacity,
                definition,
                lambda: _jsonable(arguments),
                run,
                refuses=self.refuses,
                told=True,
            )
        return self._after(definition, scope, gates, value)
