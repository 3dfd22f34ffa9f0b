"""Recognise an agent framework's objects handed to ``Sagacity.wrap()``.

A framework's tool object is routed to its adapter's ``wrap_tool`` (which returns the
framework's own tool type, journaling); an agent, a toolset or an MCP server is refused with
the name of the agent-level hook to use instead.  Recognition goes by the classes' qualified
names, so no framework is imported to ask.
"""

from __future__ import annotations

import importlib
from typing import Any

from sagacity.errors import DeclarationError

NOT_A_FRAMEWORK_OBJECT: Any = object()

# Qualified class name (anywhere in the object's MRO) → (adapter module, what to do).
_TOOLS = {
    "pydantic_ai.tools.Tool": "sagacity.adapters.pydantic_ai",
    "langchain_core.tools.base.BaseTool": "sagacity.adapters.langchain",
    "agents.tool.FunctionTool": "sagacity.adapters.openai_agents",
}
_HOOKS = {
    "pydantic_ai.agent.abstract.AbstractAgent": (
        "a Pydantic AI agent",
        "sagacity.adapters.pydantic_ai.journaled(agent, sagacity, policy=...)",
    ),
    "pydantic_ai.toolsets.abstract.AbstractToolset": (
        "a Pydantic AI toolset (an MCP server is one)",
        "sagacity.adapters.pydantic_ai.journaled(agent, sagacity, policy=...) on its agent",
    ),
    "agents.agent.AgentBase": (
        "an OpenAI Agents SDK agent",
        "sagacity.adapters.openai_agents.journaled(agent, sagacity, policy=...)",
    ),
    "agents.mcp.server.MCPServer": (
        "an OpenAI Agents SDK MCP server",
        "sagacity.adapters.openai_agents.journaled(agent, sagacity, policy=...) on its agent",
    ),
    "langgraph.pregel.main.Pregel": (
        "a LangGraph graph",
        "sagacity.adapters.langchain.SagacityMiddleware(sagacity, policy=...) in "
        "create_agent(middleware=[...]) or as the ToolNode's wrap_tool_call",
    ),
    "langgraph.prebuilt.tool_node.ToolNode": (
        "a LangGraph ToolNode",
        "ToolNode(tools, wrap_tool_call=m.wrap_tool_call, awrap_tool_call=m.awrap_tool_call) "
        "with m = sagacity.adapters.langchain.SagacityMiddleware(sagacity, policy=...)",
    ),
}
_HOSTED_PREFIX = "agents.tool."


def _names(obj: object) -> list[str]:
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(obj).__mro__]


def route(sagacity: Any, obj: object) -> Any:
    """The journaling version of a framework object, or :data:`NOT_A_FRAMEWORK_OBJECT`.

    Raises:
        DeclarationError: ``obj`` is an agent, toolset, graph or MCP server (naming the hook
            to use), a hosted tool, or a tool its adapter refuses.
    """
    names = _names(obj)
    for name in names:
        module = _TOOLS.get(name)
        if module is not None:
            adapter = importlib.import_module(module)
            return adapter.wrap_tool(sagacity, obj)
        hook = _HOOKS.get(name)
        if hook is not None:
            what, use = hook
            raise DeclarationError(
                f"{type(obj).__name__} is {what}: Sagacity.wrap() takes tools and objects "
                f"with @compensable methods; use {use}"
            )
    if names[0].startswith(_HOSTED_PREFIX):
        raise DeclarationError(
            f"{type(obj).__name__} is an OpenAI Agents SDK tool Sagacity cannot journal (it "
            "is run by the model's provider, or has no function); use a function tool and "
            "sagacity.adapters.openai_agents.wrap_tool"
        )
    return NOT_A_FRAMEWORK_OBJECT
