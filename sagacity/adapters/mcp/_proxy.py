"""An upstream MCP server's tools as Sagacity tools, declared by a tool policy.

Each upstream tool becomes a function that calls it, wrapped like any tool; the policy
(:class:`sagacity.policy.Policy`, the agent-level hooks' own) gives its reversibility and
undo, with the upstream's annotations as defaults (``readOnlyHint`` → ``READ``; a tool that
may be destructive and has no undo → ``IRREVERSIBLE``). An undo is the upstream's own
returned undo (``{ undo_tools = ["..."] }``: the result's ``{"undo": {"tool": ...,
"arguments": {...}}}``, one of the upstream tools the rule lists, called through the upstream
on compensation), another upstream tool named by the policy with arguments from the call and
its result (``{ undo = { tool = "release", arguments = { hold_id = "$result.hold_id" } } }``), or a
Python compensation (``{ by = "module:function" }``). A tool nothing covers is refused
at start-up, by name.

A proxied call's payload is the compact JSON of its arguments with the keys sorted, so a
client resuming an approved call gets the same bytes whatever order it writes them in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sagacity.adapters.mcp._upstream import Upstream
from sagacity.errors import DeclarationError
from sagacity.policy import Policy, Resolution, ToolAnnotations
from sagacity.saga._saga import Sagacity
from sagacity.tools._reversibility import Reversibility
from sagacity.undo._undo import UndoCall


@dataclass(frozen=True, kw_only=True)
class ProxiedTool:
    """One upstream tool as served by the proxy.

    Attributes:
        name: the tool's name (the same upstream and on the chain).
        function: the function that calls it upstream (undeclared: :func:`register` declares
            it by the policy's rule).
        input_schema: the upstream's JSON schema of its arguments, served unchanged.
        description: the upstream's description.
        title: the upstream's title, if any.
        resolution: how the policy covers it.
    """

    name: str
    function: Callable[..., Any]
    input_schema: Mapping[str, Any]
    description: str
    title: str | None
    resolution: Resolution

    @property
    def reversibility(self) -> Reversibility:
        """The reversibility the policy gives the tool."""
        return self.resolution.rule.reversibility


def _forwarder(upstream: Upstream, name: str) -> Callable[..., Any]:
    def forward(**arguments: Any) -> Any:
        return upstream.call_checked(name, arguments)

    forward.__name__ = name
    forward.__qualname__ = f"upstream.{name}"
    forward.__doc__ = f"Call {name!r} on the upstream MCP server ({upstream.describe})."
    return forward


def proxied_tools(upstream: Upstream, policy: Policy) -> list[ProxiedTool]:
    """Every upstream tool with the rule ``policy`` gives it (see :func:`register`).

    Warns (:class:`~sagacity.policy.PolicyWarning`) about policy names and globs that match no
    upstream tool.

    Raises:
        DeclarationError: a tool nothing covers (all such tools named), or a rule that does
            not fit a tool.
        UpstreamError: the upstream does not list its tools.
    """
    listed = upstream.tools()
    policy.warn_unmatched([t.name for t in listed], where="the upstream MCP server")
    uncovered: list[str] = []
    tools: list[ProxiedTool] = []
    for tool in sorted(listed, key=lambda t: t.name):
        resolution = policy.resolve(tool.name, ToolAnnotations.from_mcp(tool.annotations))
        if resolution is None:
            uncovered.append(tool.name)
            continue
        function = _forwarder(upstream, tool.name)
        tools.append(
            ProxiedTool(
                name=tool.name,
                function=function,
                input_schema=dict(tool.input_schema),
                description=tool.description or tool.name,
                title=tool.title,
                resolution=resolution,
            )
        )
    if uncovered:
        raise DeclarationError(
            "the tool policy covers no rule for upstream tool(s) "
            f"{', '.join(repr(n) for n in uncovered)}: give each a reversibility (and its undo) "
            "in the policy's [tools] table, or a default"
        )
    return tools


def register(sagacity: Sagacity, tools: list[ProxiedTool]) -> None:
    """Wrap each proxied tool into ``sagacity`` with its policy rule (journaled, gated,
    compensated like a declared tool; a returned undo names another proxied tool).

    Raises:
        DeclarationError: a rule does not fit (as :meth:`Sagacity.wrap_tool`).
    """
    for tool in tools:
        rule = tool.resolution.rule
        sagacity.wrap_tool(
            tool.function,
            name=tool.name,
            reversibility=rule.reversibility,
            by=rule.by,
            constraint=rule.constraint,
            undo=rule.undo if isinstance(rule.undo, UndoCall) else None,
            undo_tools=rule.undo_tools,
            grantable=rule.grantable,
        )
