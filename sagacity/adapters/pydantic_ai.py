"""Pydantic AI tools, journaled and gated: ``wrap_tool`` / ``wrap_tools``.

::

    from pydantic_ai import Agent
    from sagacity.adapters.pydantic_ai import wrap_tools

    agent = Agent(model, tools=wrap_tools(sagacity, [reserve_inventory, create_order]))
    result = sagacity.saga("order-1", lambda: agent.run_sync("Order two widgets"))

A tool is a function (decorated with ``@compensable``, or declared by the options of
:func:`wrap_tool`) or a ``pydantic_ai.Tool`` around one.  The returned ``Tool`` keeps the
original's name, description, schema and options; only the function it calls is replaced, by
one that journals the call.  So the journaling sits inside Pydantic AI's tool execution: a
``ModelRetry`` or ``ToolFailed`` the tool raises is journaled ``FAILED`` before Pydantic AI turns
it into a message for the model, and the saga compensates when the run ends even though the
model carried on.  A ``RunContext`` parameter is the framework's: it is not journaled.

An ``IRREVERSIBLE``/``PRIVILEGED`` tool does not run inside a saga: the model receives
``[AWAITING_APPROVAL] Tool '<name>' requires human approval`` as the tool's result and the saga
ends ``AWAITING_APPROVAL``; ``Sagacity.approve`` and ``resume_saga`` run the approved payload
later, outside the agent run.  Sagacity's gate is used rather than Pydantic AI's deferred-tool
approvals because the approval must be bound to the journaled payload's SHA-256 and resumed
from the chain, by another process if need be.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from pydantic_ai import Tool

from sagacity._decorators import Constraint
from sagacity._reversibility import Reversibility
from sagacity._saga import Sagacity
from sagacity.adapters._binding import bind, check_sagacity, declaration
from sagacity.errors import DeclarationError

__all__ = ["wrap_tool", "wrap_tools"]


def wrap_tool(
    sagacity: Sagacity,
    tool: Tool[Any] | Callable[..., Any],
    *,
    reversibility: Reversibility | None = None,
    by: str | Callable[..., Any] | None = None,
    constraint: Constraint | None = None,
    name: str | None = None,
) -> Tool[Any]:
    """A copy of ``tool`` whose calls inside a saga of ``sagacity`` are journaled and gated.

    Args:
        sagacity: the ``Sagacity`` whose sagas run the agent.
        tool: a ``pydantic_ai.Tool`` or a tool function.
        reversibility / by / constraint / name: the declaration, as ``@compensable`` takes it,
            for a function that carries none (``reversibility`` is then required).

    Raises:
        DeclarationError: no declaration (or two), a malformed one, a ``by=`` that does not
            resolve, a gated tool whose framework parameters lack defaults, a tool already
            wrapped, or a journaled name already taken by another tool.
    """
    host = check_sagacity(sagacity)
    declared = declaration(reversibility=reversibility, by=by, constraint=constraint, name=name)
    if not isinstance(tool, Tool):
        if not callable(tool):
            raise DeclarationError(f"expected a pydantic_ai.Tool or a function, got {tool!r}")
        tool = Tool(tool)
    schema = tool.function_schema
    function = schema.function
    properties = schema.json_schema.get("properties", {})
    payload = set(properties)
    if schema.single_arg_name is not None:
        payload = {schema.single_arg_name}
    binding = bind(
        host,
        function,
        tool_name=tool.name,
        payload_parameters=payload,
        declared=declared,
    )
    wrapped = copy.copy(tool)
    wrapped.function = binding.journaling
    wrapped.function_schema = dataclasses.replace(schema, function=binding.journaling)
    return wrapped


def wrap_tools(
    sagacity: Sagacity, tools: Iterable[Tool[Any] | Callable[..., Any]]
) -> list[Tool[Any]]:
    """:func:`wrap_tool` for each of ``tools`` (each declared with ``@compensable``).

    Every tool is checked before any is returned, so a wrong declaration fails here.

    Raises:
        DeclarationError: as :func:`wrap_tool`.
    """
    return [wrap_tool(sagacity, tool) for tool in tools]
