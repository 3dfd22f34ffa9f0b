"""LangChain and LangGraph tools, journaled and gated: ``wrap_tool`` / ``wrap_tools``.

::

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

from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as make_tool
from pydantic import BaseModel

from sagacity._decorators import Constraint, tool_definition
from sagacity._reversibility import Reversibility
from sagacity._saga import Sagacity
from sagacity.adapters._binding import bind, check_sagacity, declaration, journaling_for
from sagacity.errors import DeclarationError

__all__ = ["wrap_tool", "wrap_tools"]


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
) -> StructuredTool:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``StructuredTool`` (``@tool``) or a tool function (made one with ``@tool``'s
            defaults: its docstring is the description).
        reversibility / by / constraint / name: the declaration, as ``@compensable`` takes it,
            for a function that carries none (``reversibility`` is then required).

    Raises:
        DeclarationError: not a function-backed tool, no declaration (or two), a malformed
            one, a ``by=`` that does not resolve, a gated tool whose framework parameters
            lack defaults, a tool already wrapped, or a journaled name already taken.
    """
    host = check_sagacity(sagacity)
    declared = declaration(reversibility=reversibility, by=by, constraint=constraint, name=name)
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
