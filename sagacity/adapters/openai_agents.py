"""OpenAI Agents SDK function tools, journaled and gated: ``wrap_tool`` / ``wrap_tools``.

::

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

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.agent import ToolsToFinalOutputResult
from agents.tool import FunctionToolResult

from sagacity._decorators import Constraint
from sagacity._reversibility import Reversibility
from sagacity._saga import Sagacity
from sagacity._tool import AWAITING_PREFIX
from sagacity.adapters._binding import bind, check_sagacity, declaration
from sagacity.errors import DeclarationError

__all__ = ["stop_at_approval", "wrap_tool", "wrap_tools"]


def wrap_tool(
    sagacity: Sagacity,
    tool: FunctionTool | Callable[..., Any],
    *,
    reversibility: Reversibility | None = None,
    by: str | Callable[..., Any] | None = None,
    constraint: Constraint | None = None,
    name: str | None = None,
) -> FunctionTool:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``FunctionTool`` made by ``@function_tool``, or a tool function.
        reversibility / by / constraint / name: the declaration, as ``@compensable`` takes it,
            for a function that carries none (``reversibility`` is then required).

    Raises:
        DeclarationError: not a ``function_tool`` tool, no declaration (or two), a malformed
            one, a ``by=`` that does not resolve, a gated tool whose context parameter lacks a
            default, a tool already wrapped, or a journaled name already taken.
    """
    host = check_sagacity(sagacity)
    declared = declaration(reversibility=reversibility, by=by, constraint=constraint, name=name)
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
