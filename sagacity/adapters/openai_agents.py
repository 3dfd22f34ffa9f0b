"""OpenAI Agents SDK agents and tools, journaled and gated: ``journaled`` (every tool of an
agent, its MCP servers' included) and ``wrap_tool`` / ``wrap_tools`` (tool by tool).

``journaled(agent, sagacity, policy=...)`` returns a copy of the agent whose function tools
journal their function's calls (inside the SDK's failure handling), whose MCP servers journal
each ``call_tool``, and whose every run is one saga unless one is active::

    agent = journaled(Agent(name="shop", tools=[...], mcp_servers=[...]), sagacity, policy=p)
    result = await Runner.run(agent, "Order two widgets")   # one saga, ended with the run

Tool by tool::

    from agents import Agent, Runner
    from sagacity.adapters.openai_agents import wrap_tools

    agent = Agent(name="shop", tools=wrap_tools(sagacity, [reserve_inventory, create_order]))
    result = sagacity.saga("order-1", lambda: Runner.run_sync(agent, "Order two widgets"))

A tool is a ``FunctionTool`` made by ``@function_tool`` whose function carries
``@compensable`` or is declared by the options of :func:`wrap_tool`, or such a function itself
(made a tool with ``function_tool``'s defaults).  The SDK's tool invoker catches whatever the
function raises and, through the tool's ``failure_error_function``, gives the model an error
text instead, so the run carries on: the returned tool therefore keeps everything of the
original (name, description, schema, failure handling, guardrails, approval and timeout
settings) and only the function the invoker calls is replaced, by one that journals the call
*inside* that handling.  A failed step is journaled ``FAILED`` before the SDK hides it, and the
saga compensates when it ends.  A ``RunContextWrapper``/``ToolContext`` parameter is the SDK's:
it is not journaled.

An ``IRREVERSIBLE``/``PRIVILEGED`` tool does not run inside a saga: the model receives
``[AWAITING_APPROVAL] Tool '<name>' requires human approval`` as the tool's output and the saga
ends ``AWAITING_APPROVAL``; ``Sagacity.approve`` and ``resume_saga`` run the approved payload
later, outside the agent run.  To end the run at that point instead of letting the model
answer, pass :data:`stop_at_approval` as the agent's ``tool_use_behavior``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agents import Agent, AgentHooks, FunctionTool, RunContextWrapper, Tool, function_tool
from agents.agent import ToolsToFinalOutputResult
from agents.mcp import MCPServer
from agents.tool import FunctionToolResult
from mcp.types import CallToolResult, TextContent

from sagacity.adapters._binding import bind, check_sagacity, declaration
from sagacity.adapters._hook import AgentHook, ModelLines, remote_identity
from sagacity.errors import DeclarationError
from sagacity.policy import Policy, ToolAnnotations
from sagacity.saga._result import SagaResult
from sagacity.saga._run import SagaRun
from sagacity.saga._saga import Sagacity
from sagacity.saga._scope import SagaScope, current_scope
from sagacity.telemetry._tracing import calling_tool
from sagacity.tools._decorators import Constraint, ToolDefinition
from sagacity.tools._reversibility import Reversibility
from sagacity.tools._tool import AWAITING_PREFIX

__all__ = ["JournaledAgent", "journaled", "stop_at_approval", "wrap_tool", "wrap_tools"]


def wrap_tool(
    sagacity: Sagacity,
    tool: FunctionTool | Callable[..., Any],
    *,
    reversibility: Reversibility | None = None,
    by: str | Callable[..., Any] | None = None,
    constraint: Constraint | None = None,
    name: str | None = None,
    undo_tools: Sequence[str] = (),
) -> FunctionTool:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``FunctionTool`` made by ``@function_tool``, or a tool function.
        reversibility / by / constraint / name / undo_tools: the declaration, as
            ``@compensable`` takes it, for a function that carries none (``reversibility``
            is then required).

    Raises:
        DeclarationError: not a ``function_tool`` tool, no declaration (or two), a malformed
            one, a ``by=`` that does not resolve, a gated tool whose context parameter lacks a
            default, a tool already wrapped, or a journaled name already taken.
    """
    host = check_sagacity(sagacity)
    declared = declaration(
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        name=name,
        undo_tools=undo_tools,
    )
    if not isinstance(tool, FunctionTool):
        if not callable(tool):
            raise DeclarationError(f"expected a FunctionTool or a function, got {tool!r}")
        tool = function_tool(tool)
    try:
        function = tool.__wrapped__
    except AttributeError as exc:
        raise DeclarationError(
            f"tool {tool.name!r} was not made by @function_tool from a function, so there is "
            "no function to journal; make it with function_tool(...)"
        ) from exc
    payload = set(tool.params_json_schema.get("properties", {}))
    binding = bind(
        host, function, tool_name=tool.name, payload_parameters=payload, declared=declared
    )
    # The SDK's invoker for the journaling function: the same parsing and validation as the
    # original's (the signature is the same), calling the journaling function.  Everything
    # else, failure handling included, stays the original tool's.
    invoker = function_tool(
        binding.journaling, name_override=tool.name, strict_mode=tool.strict_json_schema
    ).on_invoke_tool
    return dataclasses.replace(tool, on_invoke_tool=invoker)


def wrap_tools(
    sagacity: Sagacity, tools: Iterable[FunctionTool | Callable[..., Any]]
) -> list[FunctionTool]:
    """:func:`wrap_tool` for each of ``tools`` (each declared with ``@compensable``).

    Raises:
        DeclarationError: as :func:`wrap_tool`.
    """
    return [wrap_tool(sagacity, tool) for tool in tools]


def stop_at_approval(
    context: RunContextWrapper[Any], results: list[FunctionToolResult]
) -> ToolsToFinalOutputResult:
    """A ``tool_use_behavior`` that ends the run when a tool call waits for approval.

    The run's final output is the ``[AWAITING_APPROVAL] ...`` text; otherwise the model
    receives the tools' outputs and the run goes on as by default.
    """
    for result in results:
        if isinstance(result.output, str) and result.output.startswith(AWAITING_PREFIX):
            return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
    return ToolsToFinalOutputResult(is_final_output=False, final_output=None)


# -- the whole agent ---------------------------------------------------------------------


class _McpToolError(Exception):
    """An MCP tool answered ``isError``: journaled ``FAILED``, its result still returned."""

    def __init__(self, result: CallToolResult) -> None:
        super().__init__(
            " ".join(getattr(c, "text", "") for c in result.content) or "the tool failed"
        )
        self.result = result


_ABSENT = object()


def _result_field(result: CallToolResult, snake: str, camel: str) -> Any:
    """A field of an MCP tool result, which the SDK spells in snake_case (2.x) or camelCase
    (1.x).  The camelCase name is read only where the snake_case one is absent: in a process
    that also loads FastMCP, reading it warns as deprecated (an error where warnings are)."""
    value = getattr(result, snake, _ABSENT)
    return getattr(result, camel, None) if value is _ABSENT else value


def _is_error(result: CallToolResult) -> bool:
    return bool(_result_field(result, "is_error", "isError"))


def _mcp_value(result: CallToolResult) -> Any:
    structured = _result_field(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    if len(texts) == 1:
        with contextlib.suppress(ValueError):
            return json.loads(texts[0])
        return texts[0]
    return [c.model_dump(mode="json") for c in result.content]


class _JournalingServer(MCPServer):
    """An agent's MCP server whose every ``call_tool`` is journaled (declared at listing)."""

    _inner: MCPServer
    _hook: AgentHook

    def __init__(self, inner: MCPServer, hook: AgentHook) -> None:
        # MCPServer.__init__ is not run: every setting is read from the wrapped server.
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_hook", hook)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_inner"), name)

    @property
    def name(self) -> str:
        return str(self._inner.name)

    async def connect(self) -> None:
        await self._inner.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self._inner.cleanup()  # type: ignore[no-untyped-call]

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        tools = await self._inner.list_tools(run_context, agent)
        uncovered = [t.name for t in tools if self._declare(t.name, t.annotations) is None]
        AgentHook.refuse_uncovered(uncovered, where=f"MCP server {self.name!r}")
        return tools

    def _declare(self, name: str, annotations: object) -> ToolDefinition | None:
        inner = self._inner

        async def call(**arguments: Any) -> Any:
            result = await inner.call_tool(name, arguments)
            if _is_error(result):
                raise _McpToolError(result)
            return _mcp_value(result)

        return self._hook.declare_remote(
            name,
            call,
            annotations=ToolAnnotations.from_mcp(annotations),
            identity=remote_identity(f"MCP server {self.name!r}", name),
        )

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        definition = self._hook.definition(tool_name)
        if definition is None:
            AgentHook.refuse_uncovered([tool_name], where=f"MCP server {self.name!r}")
        assert definition is not None
        answer: list[CallToolResult] = []

        async def run() -> Any:
            result = await self._inner.call_tool(tool_name, arguments, meta)
            answer.append(result)
            if _is_error(result):
                raise _McpToolError(result)
            return _mcp_value(result)

        try:
            value = await self._hook.call_async(definition, arguments or {}, run)
        except _McpToolError as exc:
            return exc.result
        if not answer:  # stopped at the gate: the line is the tool's text
            return CallToolResult(content=[TextContent(type="text", text=str(value))])
        return answer[0]

    async def list_prompts(self) -> Any:
        return await self._inner.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self._inner.get_prompt(name, arguments)


class _Runs:
    """The saga of each run, keyed by the run's usage object (shared by all its tool calls)."""

    def __init__(self, hook: AgentHook) -> None:
        self._hook = hook
        self._lock = threading.Lock()
        self._sessions: dict[int, tuple[object, SagaRun]] = {}
        self.last: SagaResult | None = None

    def session(self, context: RunContextWrapper[Any]) -> SagaRun | None:
        key = id(context.usage)
        with self._lock:
            known = self._sessions.get(key)
            if known is not None:
                return known[1]
        session = self._hook.new_run()
        if session is None:
            return None
        with self._lock:
            self._sessions[key] = (context.usage, session)
        return session

    async def end(self, context: RunContextWrapper[Any]) -> None:
        with self._lock:
            known = self._sessions.pop(id(context.usage), None)
        if known is not None:
            self.last = await known[1].end_async()


class _EndRunSaga(AgentHooks[Any]):
    """The agent's hooks, plus: end the run's saga when the agent produces its output."""

    def __init__(self, inner: AgentHooks[Any] | None, runs: _Runs) -> None:
        self._inner = inner
        self._runs = runs

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_end(context, agent, output)
        await self._runs.end(context)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self._inner is not None:
            await self._inner.on_start(context, agent)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self._inner is not None:
            await self._inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self._inner is not None:
            await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, *args)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)


def _payload(tool: FunctionTool) -> set[str]:
    return set(tool.params_json_schema.get("properties", {}))


@dataclasses.dataclass
class JournaledAgent(Agent[Any]):
    """An ``Agent`` whose every tool call is journaled, gated and compensable (see
    :func:`journaled`); run it with ``Runner`` as any agent."""

    sagacity_hook: AgentHook | None = dataclasses.field(default=None, repr=False, kw_only=True)
    sagacity_runs: _Runs | None = dataclasses.field(default=None, repr=False, kw_only=True)

    @property
    def last_saga(self) -> SagaResult | None:
        """The outcome of the saga the latest run that ended opened."""
        return self.sagacity_runs.last if self.sagacity_runs is not None else None

    async def get_all_tools(self, run_context: RunContextWrapper[Any]) -> list[Tool]:
        tools = await super().get_all_tools(run_context)
        return [self._entering(t) for t in tools]

    def _entering(self, tool: Tool) -> Tool:
        hook, runs = self.sagacity_hook, self.sagacity_runs
        if not isinstance(tool, FunctionTool) or hook is None or runs is None:
            return tool
        original = tool.on_invoke_tool
        definition = hook.definition(tool.name)
        remote = definition is not None and not getattr(tool, "_sagacity_function", False)
        is_mcp = getattr(tool, "_mcp_tool_binding", None) is not None

        async def invoke(context: Any, input_json: str) -> Any:
            session = runs.session(context)
            # The SDK's ToolContext names the call (the spans' gen_ai.tool.call.id).
            with _entered(session), calling_tool(getattr(context, "tool_call_id", None)):
                scope = current_scope()
                failed_before = scope.failures if scope is not None else ()
                blocked = _blocked(scope, definition)
                if definition is not None and blocked is not None and scope is not None:
                    return hook.refused_line(definition, scope.saga_id, blocked)
                if remote and not is_mcp and definition is not None:
                    arguments = json.loads(input_json) if input_json else {}
                    output = await hook.call_async(
                        definition, arguments, lambda: original(context, input_json)
                    )
                else:
                    output = await original(context, input_json)
                failed = scope.failures if scope is not None else ()
                new = [f for f in failed if f not in failed_before]
                if definition is not None and new:
                    line = hook.compensation_line(definition, new[-1].error)
                    if line is not None:
                        output = f"{output}\n{line}"
                return output

        entering = copy.copy(tool)
        entering.on_invoke_tool = invoke
        return entering


def _blocked(scope: SagaScope | None, definition: ToolDefinition | None) -> str | None:
    """The failed tool that keeps ``definition``'s call from running, if any."""
    if scope is None or definition is None:
        return None
    reads = definition.reversibility is Reversibility.READ
    failure = scope.blocking(definition.name, reads=reads)
    return (failure.tool or "?") if failure is not None else None


@contextlib.contextmanager
def _entered(session: SagaRun | None) -> Iterator[None]:
    if session is None:
        yield
        return
    with session.joined():
        yield


def journaled(
    agent: Agent[Any],
    sagacity: Sagacity,
    *,
    policy: Policy | None = None,
    lines: ModelLines | None = None,
    saga_id: Callable[[], str] | None = None,
) -> JournaledAgent:
    """A copy of ``agent`` with every tool call journaled, gated and compensable.

    Function tools made from a function (``@function_tool``) journal that function's calls,
    inside the SDK's failure handling; other function tools (agents as tools, hand-made
    ones) journal their invocation; MCP servers journal each ``call_tool``.  Each tool is
    declared by its own ``@compensable``, else by ``policy`` (by name, glob, the MCP tool's
    annotations, default).  A run opens its own saga, ended when the agent produces its
    final output, unless a saga is active (``sagacity.saga_async(...)``, a conversation).

    Raises:
        DeclarationError: a tool nothing covers (all named; an MCP tool when its server's
            tools are listed), a hosted tool (it runs on OpenAI's side, out of reach), a tool
            declared both ways, a ``by=`` that does not resolve.
    """
    if not isinstance(agent, Agent):
        raise DeclarationError(f"expected an agents.Agent, got {agent!r}")
    hook = AgentHook(sagacity, policy, lines=lines, saga_id=saga_id)
    runs = _Runs(hook)
    tools: list[Tool] = []
    uncovered: list[str] = []
    for tool in agent.tools:
        if not isinstance(tool, FunctionTool):
            raise DeclarationError(
                f"tool {getattr(tool, 'name', tool)!r} is a {type(tool).__name__}, run by "
                "OpenAI's servers where Sagacity cannot journal it; remove it, or call it "
                "through a function tool"
            )
        function = getattr(tool, "__wrapped__", None)
        if function is not None:
            definition = hook.declare_function(
                tool.name, function, payload_parameters=_payload(tool)
            )
            if definition is None:
                uncovered.append(tool.name)
                continue
            stand_in = hook.stand_in(definition, function, _payload(tool))
            invoker = function_tool(
                stand_in, name_override=tool.name, strict_mode=tool.strict_json_schema
            ).on_invoke_tool
            journaling = dataclasses.replace(tool, on_invoke_tool=invoker)
            journaling._sagacity_function = True  # type: ignore[attr-defined]
            tools.append(journaling)
            continue
        original = tool.on_invoke_tool

        async def call(_original: Any = original, **arguments: Any) -> Any:
            raise DeclarationError("this tool can only run inside an agent run")

        if hook.declare_remote(tool.name, call, annotations=None, identity=original) is None:
            uncovered.append(tool.name)
            continue
        tools.append(tool)
    AgentHook.refuse_uncovered(uncovered, where=f"agent {agent.name!r}")
    if not agent.mcp_servers:
        hook.warn_unmatched([t.name for t in tools], where=f"agent {agent.name!r}")
    fields = {f.name: getattr(agent, f.name) for f in dataclasses.fields(agent) if f.init}
    fields["tools"] = tools
    fields["mcp_servers"] = [_JournalingServer(s, hook) for s in agent.mcp_servers]
    fields["hooks"] = _EndRunSaga(agent.hooks, runs)
    return JournaledAgent(**fields, sagacity_hook=hook, sagacity_runs=runs)
