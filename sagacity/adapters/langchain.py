"""LangChain and LangGraph agents and tools, journaled and gated: ``SagacityMiddleware`` (every
tool call of an agent) and ``wrap_tool`` / ``wrap_tools`` (tool by tool).

``SagacityMiddleware(sagacity, policy=...)`` is LangChain v1 agent middleware: its
``wrap_tool_call`` sees every tool call of ``create_agent(..., middleware=[...])``, and
LangGraph's ``ToolNode(tools, wrap_tool_call=m.wrap_tool_call, awrap_tool_call=
m.awrap_tool_call)`` takes the same hook.  Each agent run is one saga (opened in
``before_agent``, ended in ``after_agent``) unless a saga is active or the middleware keeps one
saga per ``thread_id`` (``conversation=True``)::

    agent = create_agent(model, tools, middleware=[SagacityMiddleware(sagacity, policy=policy)])

Tool by tool::

    from langgraph.prebuilt import ToolNode
    from sagacity.adapters.langchain import wrap_tools

    tools = wrap_tools(sagacity, [reserve_inventory, create_order])  # @tool / @compensable
    node = ToolNode(tools)
    result = sagacity.saga("order-1", lambda: graph.invoke({"messages": [...]}))

A tool is a ``StructuredTool`` (what ``@tool`` and ``StructuredTool.from_function`` make)
whose function carries ``@compensable`` or is declared by the options of :func:`wrap_tool`,
or such a function itself.  The returned tool is a copy of the original with the same name,
description, schema and error handling; only the functions it calls (``func`` and
``coroutine``) are replaced, by ones that journal the call.  The journaling therefore runs
inside LangChain's ``BaseTool.run`` and inside LangGraph's ``ToolNode``: a ``ToolException``
turned into a message by ``handle_tool_error``, or any error turned into a ``ToolMessage`` by
``ToolNode(handle_tool_errors=...)``, is journaled ``FAILED`` first, and the saga compensates
when it ends although the agent carried on.  Injected arguments (``InjectedToolArg``,
``InjectedToolCallId``, LangGraph's ``InjectedState``), callbacks and ``RunnableConfig``
parameters are the framework's: they are not journaled.

An ``IRREVERSIBLE``/``PRIVILEGED`` tool does not run inside a saga: the agent receives
``[AWAITING_APPROVAL] Tool '<name>' requires human approval`` as the tool's output and the saga
ends ``AWAITING_APPROVAL``; ``Sagacity.approve`` and ``resume_saga`` run the approved payload
later, outside the agent run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as make_tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel

from sagacity.adapters._binding import bind, check_sagacity, declaration, journaling_for
from sagacity.adapters._hook import AgentHook, ModelLines
from sagacity.effects._effect_calls import Notice
from sagacity.errors import DeclarationError, SagaCancelledError, SagaFailedError
from sagacity.policy import Policy, ToolAnnotations
from sagacity.saga._result import SagaResult
from sagacity.saga._run import SagaRun
from sagacity.saga._saga import Sagacity
from sagacity.tools._decorators import Constraint, ToolDefinition, tool_definition
from sagacity.tools._reversibility import Reversibility

__all__ = ["SagacityMiddleware", "wrap_tool", "wrap_tools"]


def _payload_parameters(tool: StructuredTool) -> set[str]:
    schema: Any = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    if isinstance(schema, dict):
        return set(schema.get("properties", {}))
    return set(tool.args)


def wrap_tool(
    sagacity: Sagacity,
    tool: BaseTool | Callable[..., Any],
    *,
    reversibility: Reversibility | None = None,
    by: str | Callable[..., Any] | None = None,
    constraint: Constraint | None = None,
    name: str | None = None,
    undo_tools: Sequence[str] = (),
) -> StructuredTool:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``StructuredTool`` (``@tool``) or a tool function (made one with ``@tool``'s
            defaults: its docstring is the description).
        reversibility / by / constraint / name / undo_tools: the declaration, as
            ``@compensable`` takes it, for a function that carries none (``reversibility``
            is then required).

    Raises:
        DeclarationError: not a function-backed tool, no declaration (or two), a malformed
            one, a ``by=`` that does not resolve, a gated tool whose framework parameters
            lack defaults, a tool already wrapped, or a journaled name already taken.
    """
    host = check_sagacity(sagacity)
    declared = declaration(
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        name=name,
        undo_tools=undo_tools,
    )
    if not isinstance(tool, BaseTool):
        if not callable(tool):
            raise DeclarationError(f"expected a LangChain tool or a function, got {tool!r}")
        tool = make_tool(tool)
    if not isinstance(tool, StructuredTool):
        raise DeclarationError(
            f"tool {tool.name!r} is a {type(tool).__name__}: only tools backed by functions "
            "(@tool, StructuredTool.from_function) can be wrapped, because Sagacity journals "
            "the function they call"
        )
    functions = [f for f in (tool.func, tool.coroutine) if f is not None]
    if not functions:
        raise DeclarationError(f"tool {tool.name!r} has no function to wrap")
    decorated = [f for f in functions if tool_definition(f) is not None]
    if len(decorated) > 1:
        raise DeclarationError(
            f"tool {tool.name!r}: its sync and async functions both carry @compensable; "
            "declare one of them (the other is journaled under the same declaration)"
        )
    primary = decorated[0] if decorated else functions[0]
    payload = _payload_parameters(tool)
    binding = bind(
        host, primary, tool_name=tool.name, payload_parameters=payload, declared=declared
    )
    replaced: dict[str, Callable[..., Any]] = {}
    for attribute in ("func", "coroutine"):
        function = getattr(tool, attribute)
        if function is None:
            continue
        replaced[attribute] = (
            binding.journaling
            if function is primary
            else journaling_for(host, binding.definition, function, payload)
        )
    return tool.model_copy(update=replaced)


def wrap_tools(
    sagacity: Sagacity, tools: Iterable[BaseTool | Callable[..., Any]]
) -> list[StructuredTool]:
    """:func:`wrap_tool` for each of ``tools`` (each declared with ``@compensable``).

    Raises:
        DeclarationError: as :func:`wrap_tool`.
    """
    return [wrap_tool(sagacity, tool) for tool in tools]


# -- the whole agent ---------------------------------------------------------------------

SAGA_KEY = "sagacity_saga_id"


class SagaState(AgentState[Any]):
    """The agent state plus the id of the saga the current run journals into."""

    sagacity_saga_id: NotRequired[str]


class _ToolError(Exception):
    """A tool failure the framework turned into an error message (journaled ``FAILED``)."""


def _journaled_value(message: ToolMessage | Command[Any] | Any) -> Any:
    if isinstance(message, ToolMessage):
        content = message.content
        if isinstance(content, str):
            with contextlib.suppress(ValueError):
                parsed = json.loads(content)
                if isinstance(parsed, dict | list):
                    return parsed
        return content
    return repr(message)


def _function_of(tool: BaseTool) -> Callable[..., Any] | None:
    if not isinstance(tool, StructuredTool):
        return None
    functions = [f for f in (tool.func, tool.coroutine) if f is not None]
    decorated = [f for f in functions if tool_definition(f) is not None]
    chosen = decorated or functions
    return chosen[0] if chosen else None


class SagacityMiddleware(AgentMiddleware[SagaState, Any, Any]):
    """Agent middleware journaling, gating and compensating every tool call of the agent.

    Args:
        sagacity: the ``Sagacity`` whose sagas journal the calls.
        policy: declares the tools that carry no ``@compensable``.
        tools: the agent's tools, checked now (an uncovered one is refused by name); without
            it a tool is checked at its first call.
        lines: what the model is told when a gate stops a call or the saga is undone.
        conversation: one saga per ``thread_id`` (of the run's ``configurable``) across runs,
            ended with ``sagacity.conversation(thread_id).end()``, instead of one per run.
        saga_id: makes each run's saga id (default ``run-<hex>``).

    Raises:
        DeclarationError: a tool nothing covers (all named), declared twice, or a ``by=`` that
            does not resolve.
    """

    state_schema = SagaState

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        policy: Policy | None = None,
        tools: Sequence[BaseTool | Callable[..., Any]] | None = None,
        lines: ModelLines | None = None,
        conversation: bool = False,
        saga_id: Callable[[], str] | None = None,
    ) -> None:
        super().__init__()
        self.tools = []
        self._hook = AgentHook(sagacity, policy, lines=lines, saga_id=saga_id)
        self._conversation = bool(conversation)
        self._sessions: dict[str, SagaRun] = {}
        self._abandoned: list[tuple[SagaRun, Exception]] = []
        self._lock = threading.Lock()
        if tools is not None:
            self.check(tools)

    @property
    def sagacity(self) -> Sagacity:
        """The ``Sagacity`` the calls are journaled by."""
        return self._hook.sagacity

    def check(self, tools: Sequence[BaseTool | Callable[..., Any]]) -> None:
        """Declare ``tools`` now; refuse (naming them all) those nothing covers.

        Raises:
            DeclarationError: as the constructor.
        """
        objects = [t if isinstance(t, BaseTool) else make_tool(t) for t in tools]
        uncovered = [t.name for t in objects if self._declare(t) is None]
        AgentHook.refuse_uncovered(uncovered, where="SagacityMiddleware")
        self._hook.warn_unmatched([t.name for t in objects], where="the agent")

    def _declare(self, tool: BaseTool) -> ToolDefinition | None:
        function = _function_of(tool)
        if function is not None and isinstance(tool, StructuredTool):
            return self._hook.declare_function(
                tool.name, function, payload_parameters=_payload_parameters(tool)
            )

        async def call(**arguments: Any) -> Any:
            return await tool.ainvoke(arguments)

        metadata = tool.metadata or {}
        return self._hook.declare_remote(
            tool.name,
            call,
            annotations=ToolAnnotations.from_mcp(metadata.get("annotations", metadata)),
            identity=getattr(tool, "_run", call),
        )

    # -- runs -----------------------------------------------------------------------------
    def end_abandoned(self) -> list[SagaResult]:
        """End (and compensate) the sagas of runs a tool's exception ended before
        ``after_agent``; done at the start of every run, and by this call."""
        with self._lock:
            abandoned, self._abandoned = self._abandoned, []
        return [session.end(error) for session, error in abandoned]

    def before_agent(self, state: SagaState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.end_abandoned()
        if self._conversation:
            return None
        session = self._hook.new_run()
        if session is None:
            return None
        with self._lock:
            self._sessions[session.saga_id] = session
        return {SAGA_KEY: session.saga_id}

    async def abefore_agent(self, state: SagaState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        # Opening the saga waits for the journal: not on the event loop.
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def _pop(self, state: Any) -> SagaRun | None:
        saga = state.get(SAGA_KEY) if isinstance(state, dict) else None
        if saga is None:
            return None
        with self._lock:
            return self._sessions.pop(saga, None)

    def after_agent(self, state: SagaState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._pop(state)
        if session is not None:
            session.end()
        return None

    async def aafter_agent(self, state: SagaState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._pop(state)
        if session is not None:
            await session.end_async()
        return None

    def _session(self, request: ToolCallRequest) -> SagaRun | None:
        if self._conversation:
            config = getattr(request.runtime, "config", None) or {}
            thread = (config.get("configurable") or {}).get("thread_id")
            if thread is None:
                raise DeclarationError(
                    "SagacityMiddleware(conversation=True) needs the run's thread_id: invoke "
                    'the agent with config={"configurable": {"thread_id": ...}}'
                )
            return self.sagacity.conversation(str(thread))
        state = request.state
        saga = state.get(SAGA_KEY) if isinstance(state, dict) else None
        if saga is None:
            return None
        with self._lock:
            return self._sessions.get(saga)

    @contextlib.contextmanager
    def _entered(self, session: SagaRun | None) -> Iterator[None]:
        if session is None:
            yield
            return
        with session.joined():
            yield

    def _definition(self, request: ToolCallRequest) -> ToolDefinition | None:
        name = request.tool_call["name"]
        known = self._hook.definition(name)
        if known is not None or request.tool is None:
            return known
        definition = self._declare(request.tool)
        if definition is None:
            AgentHook.refuse_uncovered([name], where="SagacityMiddleware")
        return definition

    def _message(self, request: ToolCallRequest, text: str) -> ToolMessage:
        # A replayed call's recorded result is a success; every other stop is not a result.
        replayed = isinstance(text, Notice) and text.kind == "replayed"
        return ToolMessage(
            content=str(text),
            name=request.tool_call["name"],
            tool_call_id=request.tool_call["id"],
            status="success" if replayed else "error",
        )

    def _told(
        self, request: ToolCallRequest, message: Any, definition: ToolDefinition, exc: Exception
    ) -> ToolMessage:
        line = self._hook.compensation_line(definition, exc) or ""
        content = message.content if isinstance(message, ToolMessage) else str(exc)
        return self._message(request, f"{content}\n{line}".strip())

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Journal (or gate) the call; tell the model when the saga is undone."""
        definition = self._definition(request)
        if definition is None:
            return handler(request)
        session = self._session(request)
        answer: list[Any] = []

        def run() -> Any:
            message = handler(request)
            answer.append(message)
            if isinstance(message, ToolMessage) and message.status == "error":
                raise _ToolError(str(message.content))
            return _journaled_value(message)

        with self._entered(session):
            try:
                value = self._hook.call(
                    definition, request.tool_call["args"], run, call_id=request.tool_call.get("id")
                )
            except SagaFailedError as exc:
                return self._message(request, self._hook.refused_line(definition, exc))
            except _ToolError as exc:
                return self._told(request, answer[0], definition, exc)
            except Exception as exc:
                self._abandon(session, exc)
                raise
        if not answer:  # stopped at the gate, or its effect was had already
            return self._message(request, value)
        return answer[0]  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """:meth:`wrap_tool_call` for asyncio."""
        definition = self._definition(request)
        if definition is None:
            return await handler(request)
        session = self._session(request)
        answer: list[Any] = []

        async def run() -> Any:
            message = await handler(request)
            answer.append(message)
            if isinstance(message, ToolMessage) and message.status == "error":
                raise _ToolError(str(message.content))
            return _journaled_value(message)

        with self._entered(session):
            try:
                value = await self._hook.call_async(
                    definition, request.tool_call["args"], run, call_id=request.tool_call.get("id")
                )
            except SagaFailedError as exc:
                return self._message(request, self._hook.refused_line(definition, exc))
            except _ToolError as exc:
                return self._told(request, answer[0], definition, exc)
            except Exception as exc:
                self._abandon(session, exc)
                raise
            except asyncio.CancelledError:
                self._abandon(session, SagaCancelledError("the agent run was cancelled"))
                raise
        if not answer:
            return self._message(request, value)
        return answer[0]  # type: ignore[no-any-return]

    def _abandon(self, session: SagaRun | None, error: Exception) -> None:
        # The exception ends the agent run before after_agent.  Other calls of the same step
        # may still be running, so the saga is ended later (end_abandoned), not here.
        if session is None or self._conversation:
            return
        with self._lock:
            if self._sessions.pop(session.saga_id, None) is not None:
                self._abandoned.append((session, error))
