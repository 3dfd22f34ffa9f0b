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
    compensation it is read again from the journaled result and the named registered tool is
    called with ``arguments`` — only if the tool declares it in ``undo_tools`` and it is not
    gated.
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


_REFERENCE_ROOTS = ("arguments", "result")


@dataclass(frozen=True, kw_only=True)
class UndoCall:
    """An undo a declaration names: another registered tool, with arguments taken from the
    call and from its result (a tool policy's ``undo = { tool = ..., arguments = {...} }``).

    Each argument is a literal, or a reference ``"$arguments.<path>"`` / ``"$result.<path>"``
    (dotted keys into the call's arguments or its JSON result; ``"$result"`` is the whole
    result).  When the step is journaled ``EXECUTED`` the references are resolved and recorded
    for people; compensation resolves them again from the journaled call and result and calls
    ``tool`` (never a gated one) with them.

    Raises:
        SerializationError: ``tool`` is empty, or a reference is malformed.
    """

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise SerializationError("an undo call names a non-empty tool")
        if not isinstance(self.arguments, Mapping):
            raise SerializationError("an undo call's arguments are a table of argument names")
        for name, value in self.arguments.items():
            if isinstance(value, str) and value.startswith("$"):
                root = value[1:].split(".", 1)[0]
                if root not in _REFERENCE_ROOTS:
                    raise SerializationError(
                        f"undo argument {name!r}: {value!r} refers to neither $arguments nor "
                        "$result"
                    )
        object.__setattr__(self, "arguments", MappingProxyType(dict(self.arguments)))

    def render(self, *, arguments: Mapping[str, Any], result: Any) -> Undo:
        """The undo of one executed call.

        Raises:
            SerializationError: a reference names something the call or its result lacks.
        """
        sources = {"arguments": arguments, "result": result}
        rendered: dict[str, Any] = {}
        for name, value in self.arguments.items():
            if not (isinstance(value, str) and value.startswith("$")):
                rendered[name] = value
                continue
            root, *path = value[1:].split(".")
            found: Any = sources[root]
            for key in path:
                if not isinstance(found, Mapping) or key not in found:
                    raise SerializationError(
                        f"undo argument {name!r}: {value!r} is not in the call's {root}"
                    )
                found = found[key]
            rendered[name] = found
        return Undo(tool=self.tool, arguments=rendered)


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


def journaled_undo(data: object) -> Undo | object | None:
    """:func:`extract_undo` of a result as journaled (JSON data, see
    ``sagacity.tools._codec.result_data``): a tool that returned an :class:`Undo` itself is
    journaled as its ``{"tool": ..., "arguments": {...}}`` form, read back here."""
    if isinstance(data, Mapping) and set(data) == {"tool", "arguments"}:
        tool, arguments = data["tool"], data["arguments"]
        if isinstance(tool, str) and tool and isinstance(arguments, Mapping):
            return Undo(tool=tool, arguments=arguments)
    return extract_undo(data)


def undo_declared(value: object) -> bool:
    """``value`` (from :func:`extract_undo`) says something about undo."""
    return value is not _NO_UNDO
