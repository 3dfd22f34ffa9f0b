"""Framework adapters: agent frameworks' tools, journaled and gated with no change to their code.

Each framework has an agent-level hook that sees every tool call of an agent, whatever
registered the tool: ``pydantic_ai.journaled``, ``langchain.SagacityMiddleware``,
``openai_agents.journaled`` (tools without ``@compensable`` are declared by a
:class:`sagacity.policy.Policy`; what the model is told is :class:`ModelLines`).

One module per framework, each importing its framework only when imported itself:

* :mod:`sagacity.adapters.pydantic_ai` — Pydantic AI ``Tool`` objects and tool functions;
* :mod:`sagacity.adapters.langchain` — LangChain tools (``@tool``, ``StructuredTool``), as
  used by LangGraph agents;
* :mod:`sagacity.adapters.openai_agents` — OpenAI Agents SDK ``FunctionTool`` objects.

Each offers ``wrap_tool(sagacity, tool, ...)`` and ``wrap_tools(sagacity, tools)``.  They wrap
the tool's own function, the innermost callable the framework runs, *inside* the framework's
error handling: the framework may turn a tool's exception into a message for the model and
carry on, yet the step is journaled ``FAILED`` first and the saga compensates when it ends.
"""

from sagacity.adapters._hook import ModelLines

__all__ = ["ModelLines"]
