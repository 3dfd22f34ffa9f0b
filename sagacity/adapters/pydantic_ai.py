"""Pydantic AI agents and tools, journaled and gated: ``journaled`` (the whole agent), and
``wrap_tool`` / ``wrap_tools`` (tool by tool).

``journaled(agent, sagacity, policy=...)`` covers every tool the agent can reach, however it
was registered (``tools=``, ``@agent.tool``, ``@agent.tool_plain``, a ``FunctionToolset``, an
MCP server): a capability wraps the agent's assembled toolset in a toolset that journals each
call, and opens one saga per run when none is active::

    agent = journaled(Agent(model, tools=[...], toolsets=[...]), sagacity, policy=policy)
    agent.run_sync("Order two widgets")        # one saga; agent.last_saga is its outcome

Tool by tool::

    from pydantic_ai import Agent
    from sagacity.adapters.pydantic_ai import wrap_tools

    agent = Agent(model, tools=wrap_tools(sagacity, [reserve_inventory, create_order]))
    result = sagacity.saga("order-1", lambda: agent.run_sync("Order two widgets"))

A tool is a function (decorated with ``@compensable``, or declared by the options of
:func:`wrap_tool`) or a ``pydantic_ai.Tool`` around one.  The returned ``Tool`` keeps the
original's name, description, schema and options; only the function it calls is replaced, by
one that journals the call.  So the journaling sits inside Pydantic AI's tool execution: a
``ModelRetry`` or ``ToolFailed`` the tool raises (the tool refusing the call before acting,
for the model to adapt) is journaled as a refusal (``FAILED`` with ``refused``: no effect,
nothing undone, the saga goes on) before Pydantic AI turns it into a message for the model;
any other exception ends the run and the saga compensates.  A ``RunContext`` parameter is the
framework's: it is not journaled.

An ``IRREVERSIBLE``/``PRIVILEGED`` tool does not run inside a saga: the model receives
``[AWAITING_APPROVAL] Tool '<name>' requires human approval`` as the tool's result and the saga
ends ``AWAITING_APPROVAL``; ``Sagacity.approve`` and ``resume_saga`` run the approved payload
later, outside the agent run.  Sagacity's gate is used rather than Pydantic AI's deferred-tool
approvals because the approval must be bound to the journaled payload's SHA-256 and resumed
from the chain, by another process if need be.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, TypeVar

from pydantic_ai import Tool
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.agent.wrapper import WrapperAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.function import FunctionToolsetTool

from sagacity.adapters._binding import bind, check_sagacity, declaration
from sagacity.adapters._hook import AgentHook, ModelLines, remote_identity
from sagacity.effects._effect_calls import LINES
from sagacity.errors import DeclarationError, SagaFailedError
from sagacity.policy import Policy, ToolAnnotations
from sagacity.saga._result import SagaResult
from sagacity.saga._saga import Sagacity
from sagacity.saga._scope import current_scope
from sagacity.tools._decorators import Constraint, ToolDefinition
from sagacity.tools._reversibility import Reversibility

__all__ = ["JournaledAgent", "journaled", "wrap_tool", "wrap_tools"]

RETRY_SIGNALS = (ModelRetry, ToolFailed)
"""Pydantic AI's signals that a tool refused a call ("fix your arguments", "adapt"): journaled
as refusals, never as failed steps (docs/adr/0026-effects-and-refusals.md)."""


def _function_payload(tool: Tool[Any]) -> set[str]:
    schema = tool.function_schema
    if schema.single_arg_name is not None:
        return {schema.single_arg_name}
    return set(schema.json_schema.get("properties", {}))


def wrap_tool(
    sagacity: Sagacity,
    tool: Tool[Any] | Callable[..., Any],
    *,
    reversibility: Reversibility | None = None,
    by: str | Callable[..., Any] | None = None,
    constraint: Constraint | None = None,
    name: str | None = None,
    undo_tools: Sequence[str] = (),
) -> Tool[Any]:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``pydantic_ai.Tool`` or a tool function.
        reversibility / by / constraint / name / undo_tools: the declaration, as
            ``@compensable`` takes it, for a function that carries none (``reversibility``
            is then required).

    Raises:
        DeclarationError: no declaration (or two), a malformed one, a ``by=`` that does not
            resolve, a gated tool whose framework parameters lack defaults, a tool already
            wrapped, or a journaled name already taken by another tool.
    """
    host = check_sagacity(sagacity)
    declared = declaration(
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        name=name,
        undo_tools=undo_tools,
    )
    if not isinstance(tool, Tool):
        if not callable(tool):
            raise DeclarationError(f"expected a pydantic_ai.Tool or a function, got {tool!r}")
        tool = Tool(tool)
    schema = tool.function_schema
    function = schema.function
    payload = _function_payload(tool)
    binding = bind(
        host,
        function,
        tool_name=tool.name,
        payload_parameters=payload,
        declared=declared,
        refuses=RETRY_SIGNALS,
    )
    telling = _telling(binding.journaling, binding.name)
    wrapped = copy.copy(tool)
    wrapped.function = telling
    wrapped.function_schema = dataclasses.replace(schema, function=telling)
    return wrapped


def _refusal_told(exc: ModelRetry | ToolFailed, tool: str) -> ModelRetry | ToolFailed:
    scope = current_scope()
    line = LINES["refusal"].format(tool=tool, saga_id=scope.saga_id if scope else "")
    return type(exc)(f"{exc.message}\n{line}")


def _telling(journaling: Callable[..., Any], tool: str) -> Callable[..., Any]:
    """``journaling`` telling the model, after a refusal's own message, that nothing happened
    (inside a saga: outside one nothing is journaled and the message is the tool's alone)."""
    if inspect.iscoroutinefunction(journaling):

        @functools.wraps(journaling)
        async def telling_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await journaling(*args, **kwargs)
            except RETRY_SIGNALS as exc:
                if current_scope() is None:
                    raise
                raise _refusal_told(exc, tool) from exc

        return telling_async

    @functools.wraps(journaling)
    def telling(*args: Any, **kwargs: Any) -> Any:
        try:
            return journaling(*args, **kwargs)
        except RETRY_SIGNALS as exc:
            if current_scope() is None:
                raise
            raise _refusal_told(exc, tool) from exc

    return telling


def wrap_tools(
    sagacity: Sagacity, tools: Iterable[Tool[Any] | Callable[..., Any]]
) -> list[Tool[Any]]:
    """:func:`wrap_tool` for each of ``tools`` (each declared with ``@compensable``).

    Every tool is checked before any is returned, so a wrong declaration fails here.

    Raises:
        DeclarationError: as :func:`wrap_tool`.
    """
    return [wrap_tool(sagacity, tool) for tool in tools]


# -- the whole agent ---------------------------------------------------------------------


def _leaves(toolsets: Iterable[AbstractToolset[Any]]) -> list[AbstractToolset[Any]]:
    found: list[AbstractToolset[Any]] = []
    for toolset in toolsets:
        toolset.apply(found.append)
    return found


def _function_of(tool: ToolsetTool[Any]) -> Tool[Any] | None:
    if not isinstance(tool, FunctionToolsetTool) or not isinstance(tool.toolset, FunctionToolset):
        return None
    return tool.toolset.tools.get(tool.original_name or tool.tool_def.name)


def _remote_call(toolset: AbstractToolset[Any], name: str) -> Callable[..., Any]:
    direct = getattr(toolset, "direct_call_tool", None)

    async def call(**arguments: Any) -> Any:
        if direct is None:
            raise DeclarationError(
                f"tool {name!r} of {toolset.label} can only run inside an agent run"
            )
        async with toolset:
            return await direct(name, arguments)

    return call


class _Journaling(AbstractCapability[Any]):
    """The capability ``journaled`` adds to every run: one saga per run, every call journaled."""

    def __init__(self, hook: AgentHook, owner: JournaledAgent[Any, Any]) -> None:
        self._hook = hook
        self._owner = owner

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return _JournalingToolset(wrapped=toolset, hook=self._hook, owner=self._owner)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> AgentRunResult[Any]:
        active = current_scope()
        if active is not None and not active.closed:
            return await handler()  # type: ignore[no-any-return]
        run = await asyncio.to_thread(self._hook.new_run)
        assert run is not None
        error: Exception | None = None
        result: AgentRunResult[Any] | None = None
        with run.joined():
            try:
                result = await handler()
            except Exception as exc:
                error = exc
            except asyncio.CancelledError:
                # The run was cancelled: its completed steps are undone, once.
                self._owner._last_saga = await run.cancel_async("the agent run was cancelled")
                raise
        self._owner._last_saga = await run.end_async(error)
        if error is not None:
            raise error
        assert result is not None
        return result


@dataclasses.dataclass
class _JournalingToolset(WrapperToolset[Any]):
    """The agent's assembled toolset, every call journaled (see :func:`journaled`)."""

    hook: AgentHook = dataclasses.field(kw_only=True)
    owner: JournaledAgent[Any, Any] = dataclasses.field(kw_only=True)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        uncovered = []
        for name, tool in tools.items():
            if self.owner._declare(name, tool) is None:
                uncovered.append(name)
        AgentHook.refuse_uncovered(uncovered, where=f"agent {self.owner.name or ''}".strip())
        self.hook.warn_unmatched(tools, where="the agent")
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        definition = self.owner._declare(name, tool)
        if definition is None:  # listed tools were checked; a tool added since was not
            AgentHook.refuse_uncovered([name], where="agent")
        assert definition is not None
        try:
            return await self.hook.call_async(
                definition,
                tool_args,
                lambda: self.wrapped.call_tool(name, tool_args, ctx, tool),
                call_id=getattr(ctx, "tool_call_id", None),
            )
        except SagaFailedError as exc:
            raise ToolFailed(self.hook.refused_line(definition, exc)) from exc
        except (ModelRetry, ToolFailed) as exc:
            # The tool refused before acting (journaled so): nothing is undone, and the model
            # may call again, as the signal asks.
            if current_scope() is None:
                raise
            raise type(exc)(f"{exc}\n{self.hook.refusal_line(definition)}") from exc


DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")


class JournaledAgent(WrapperAgent[DepsT, OutputT]):
    """An agent whose every tool call is journaled, gated and compensable (see
    :func:`journaled`).  Use it as the agent: ``run``, ``run_sync``, ``run_stream``, ``iter``.

    Attributes:
        last_saga: the outcome of the saga the latest run opened (``None`` when the runs
            joined a saga already active, such as ``sagacity.saga(...)`` or a conversation).
    """

    def __init__(
        self,
        wrapped: AbstractAgent[DepsT, OutputT],
        hook: AgentHook,
    ) -> None:
        super().__init__(wrapped)
        self._hook = hook
        self._capability = _Journaling(hook, self)
        self._last_saga: SagaResult | None = None

    @property
    def last_saga(self) -> SagaResult | None:
        """The outcome of the saga the latest run opened."""
        return self._last_saga

    def _declare(self, name: str, tool: ToolsetTool[Any]) -> ToolDefinition | None:
        function_tool = _function_of(tool)
        if function_tool is not None:
            return self._hook.declare_function(
                name,
                function_tool.function_schema.function,
                payload_parameters=_function_payload(function_tool),
            )
        metadata = tool.tool_def.metadata or {}
        return self._hook.declare_remote(
            name,
            _remote_call(tool.toolset, name),
            annotations=ToolAnnotations.from_mcp(metadata.get("annotations")),
            identity=remote_identity(tool.toolset.id or tool.toolset.label, name),
        )

    @contextlib.asynccontextmanager
    async def iter(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        capabilities = [self._capability, *(kwargs.pop("capabilities", None) or ())]
        async with self.wrapped.iter(*args, capabilities=capabilities, **kwargs) as run:
            yield run


def journaled(
    agent: AbstractAgent[DepsT, OutputT],
    sagacity: Sagacity,
    *,
    policy: Policy | None = None,
    lines: ModelLines | None = None,
    saga_id: Callable[[], str] | None = None,
) -> JournaledAgent[DepsT, OutputT]:
    """``agent`` with every tool call journaled, gated and compensable.

    Every tool the agent can reach is covered: those given as ``tools=``, registered with
    ``@agent.tool`` / ``@agent.tool_plain`` (before or after this call), function toolsets and
    MCP servers.  Each is declared by its own ``@compensable``, else by ``policy`` (by name,
    glob, MCP annotations, default).  Each run opens its own saga unless one is active
    (``sagacity.saga(...)``, ``sagacity.conversation(id).call(...)``).

    Args:
        agent: the Pydantic AI agent.
        sagacity: the ``Sagacity`` whose sagas journal the calls.
        policy: declares the tools that carry no ``@compensable``.
        lines: what the model is told when a gate stops a call or the saga is undone.
        saga_id: makes each run's saga id (default ``run-<hex>``).

    Raises:
        DeclarationError: a function tool nothing covers (all of them named), a tool declared
            both ways, a ``by=`` that does not resolve.  An MCP tool nothing covers is refused
            by name when its server's tools are listed, at the start of a run.
    """
    if not isinstance(agent, AbstractAgent):
        raise DeclarationError(f"expected a pydantic_ai Agent, got {agent!r}")
    hook = AgentHook(sagacity, policy, lines=lines, saga_id=saga_id, refuses=RETRY_SIGNALS)
    wrapper = JournaledAgent(agent, hook)
    uncovered: list[str] = []
    names: list[str] = []
    dynamic = False
    for leaf in _leaves(agent.toolsets):
        if not isinstance(leaf, FunctionToolset):
            dynamic = True
            continue
        for name, tool in leaf.tools.items():
            names.append(name)
            definition = hook.declare_function(
                name, tool.function_schema.function, payload_parameters=_function_payload(tool)
            )
            if definition is None:
                uncovered.append(name)
    AgentHook.refuse_uncovered(uncovered, where=f"agent {agent.name or ''}".strip())
    if not dynamic:
        hook.warn_unmatched(names, where="the agent")
    return wrapper
