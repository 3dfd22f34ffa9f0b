"""A tool result's own undo: which registered tool puts the effect back, with what arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sagacity.errors import SerializationError


@dataclass(frozen=True, kw_only=True)
class Undo:
    """The call that reverses a write, returned by the write itself.

    A tool without ``by=`` may return an ``Undo`` (or a dict with key ``"undo"`` holding one,
    a ``{"tool": ..., "arguments": {...}}`` dict, or ``None`` for "no undo exists"); on
    compensation the named registered tool is called with ``arguments``.
    """

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise SerializationError("Undo.tool must be a non-empty tool name")
        if not isinstance(self.arguments, Mapping):
            raise SerializationError("Undo.arguments must be a mapping of argument names")
        object.__setattr__(self, "arguments", MappingProxyType(dict(self.arguments)))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form journaled with the result: ``{"tool": ..., "arguments": {...}}``."""
        return {"tool": self.tool, "arguments": dict(self.arguments)}


_NO_UNDO = object()


def extract_undo(result: object) -> Undo | object | None:
    """The undo a result carries: an :class:`Undo`, ``None`` (declared: no undo exists), or
    the module's "not declared" sentinel when the result says nothing about undo."""
    if isinstance(result, Undo):
        return result
    if isinstance(result, Mapping) and "undo" in result:
        undo = result["undo"]
        if undo is None or isinstance(undo, Undo):
            return undo
        if isinstance(undo, Mapping) and isinstance(undo.get("tool"), str):
            arguments = undo.get("arguments") or {}
            if isinstance(arguments, Mapping):
                return Undo(tool=undo["tool"], arguments=arguments)
    return _NO_UNDO


def undo_declared(value: object) -> bool:
    """``value`` (from :func:`extract_undo`) says something about undo."""
    return value is not _NO_UNDO
