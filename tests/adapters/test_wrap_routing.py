"""``Sagacity.wrap()`` recognises a framework's objects: tools go to their adapter, agents,
toolsets, graphs and MCP servers are refused naming the hook to use."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent as OpenAIAgent
from agents import FunctionTool, WebSearchTool, function_tool
from langchain_core.tools import StructuredTool, tool
from langgraph.prebuilt import ToolNode
from pydantic_ai import Agent, Tool
from pydantic_ai.toolsets import FunctionToolset

from sagacity import Sagacity
from sagacity.errors import DeclarationError

from . import shop


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: Tool(shop.reserve_inventory), Tool),
        (lambda: tool(shop.reserve_inventory), StructuredTool),
        (lambda: function_tool(shop.reserve_inventory), FunctionTool),
    ],
    ids=["pydantic_ai", "langchain", "openai_agents"],
)
def test_a_framework_tool_is_routed_to_its_adapter(make: Any, kind: type) -> None:
    sagacity = Sagacity()
    wrapped = sagacity.wrap(make())
    assert isinstance(wrapped, kind)
    assert "reserve_inventory" in sagacity.registry


@pytest.mark.parametrize(
    ("obj", "hook"),
    [
        (lambda: Agent("test"), "sagacity.adapters.pydantic_ai.journaled"),
        (lambda: FunctionToolset([]), "sagacity.adapters.pydantic_ai.journaled"),
        (lambda: OpenAIAgent(name="a"), "sagacity.adapters.openai_agents.journaled"),
        (lambda: ToolNode([tool(shop.reserve_inventory)]), "SagacityMiddleware"),
        (lambda: WebSearchTool(), "use a function tool"),
    ],
    ids=["pydantic-agent", "toolset", "openai-agent", "tool-node", "hosted-tool"],
)
def test_an_agent_or_toolset_is_refused_naming_the_hook(obj: Any, hook: str) -> None:
    with pytest.raises(DeclarationError, match=hook):
        Sagacity().wrap(obj())


def test_an_undeclared_framework_tool_is_refused_by_its_adapter() -> None:
    def undeclared(x: int) -> int:
        """Nothing declares me."""
        return x

    with pytest.raises(DeclarationError, match="has no declaration"):
        Sagacity().wrap(Tool(undeclared))
