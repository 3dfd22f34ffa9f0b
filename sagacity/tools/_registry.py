"""The tools a ``Sagacity`` knows, by journaled name, and how to undo each."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sagacity.errors import DeclarationError
from sagacity.tools._decorators import CompensationDefinition, ToolDefinition
from sagacity.tools._reversibility import Reversibility


@dataclass(frozen=True, kw_only=True)
class RegisteredTool:
    """One wrapped tool.

    Attributes:
        name: the name journaled for its calls.
        definition: what ``@compensable`` declared.
        function: the undecorated callable (bound to its object for methods); calling it
            journals nothing: resume and compensation call it after journaling themselves.
        wrapped: the journaling callable handed to the agent.
        compensation: the resolved ``by=`` compensation (bound), if any.
        compensation_definition: its ``@compensation`` declaration.
    """

    name: str
    definition: ToolDefinition
    function: Callable[..., Any]
    wrapped: Callable[..., Any]
    compensation: Callable[..., Any] | None = None
    compensation_definition: CompensationDefinition | None = None

    @property
    def reversibility(self) -> Reversibility:
        """The declared reversibility."""
        return self.definition.reversibility

    @property
    def signature(self) -> inspect.Signature:
        """The callable's signature as the agent sees it (no ``self``)."""
        return inspect.signature(self.function)


class ToolRegistry:
    """Registered tools by name; thread-safe.  Services look tools up by journaled name.

    Args:
        admit: checks each definition before it is registered (raising refuses it): what the
            owning ``Sagacity`` requires of its tools (a journal that seals, for a tool with
            fields to redact).
    """

    def __init__(self, admit: Callable[[ToolDefinition], None] | None = None) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._lock = threading.Lock()
        self._admit = admit

    def register(self, tool: RegisteredTool) -> None:
        """Add ``tool``; a second object of the same declaration replaces the first.

        Raises:
            DeclarationError: another, different declaration already uses the name, or an
                undo names a gated tool (see :meth:`register_all`).
        """
        self.register_all([tool])

    def register_all(self, tools: list[RegisteredTool]) -> None:
        """Add every tool or none (a clash leaves the registry unchanged).

        Raises:
            DeclarationError: a name is used by another, different declaration, or a tool
                names as its undo a tool that is gated (``IRREVERSIBLE`` / ``PRIVILEGED``):
                an undo runs without approval, so it must never be one.
            ConfigurationError: ``admit`` refuses a tool.
        """
        if self._admit is not None:
            for tool in tools:
                self._admit(tool.definition)
        with self._lock:
            for tool in tools:
                existing = self._tools.get(tool.name)
                if existing is not None and existing.definition.function is not (
                    tool.definition.function
                ):
                    raise DeclarationError(
                        f"two different tools are named {tool.name!r} "
                        f"({existing.definition.function.__qualname__} and "
                        f"{tool.definition.function.__qualname__}); give one a distinct name="
                    )
            _check_undo_targets({**self._tools, **{tool.name: tool for tool in tools}})
            for tool in tools:
                self._tools[tool.name] = tool

    def get(self, name: str) -> RegisteredTool | None:
        """The tool registered under ``name``, if any."""
        with self._lock:
            return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        with self._lock:
            return tuple(sorted(self._tools))

    def __iter__(self) -> Iterator[RegisteredTool]:
        with self._lock:
            return iter(list(self._tools.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._tools)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._tools


def _check_undo_targets(tools: Mapping[str, RegisteredTool]) -> None:
    """Refuse an undo (named, or one a result may return) that would call a gated tool.

    Checked over the whole registry on every registration, so the order in which a tool and
    its undo tool are registered does not matter.
    """
    for tool in tools.values():
        for target in tool.definition.undo_targets():
            undo = tools.get(target)
            if undo is not None and undo.reversibility.gated:
                raise DeclarationError(
                    f"tool {tool.name!r} names {target!r} as its undo, but {target!r} is "
                    f"{undo.reversibility.value}: an undo runs without approval, so it is "
                    "never a gated tool; declare another undo"
                )
