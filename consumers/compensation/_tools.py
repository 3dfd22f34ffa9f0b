"""Loading the tools the service compensates with, from ``package.module:attr`` targets."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import Any

from sagacity._decorators import tool_definition
from sagacity._saga import Sagacity
from sagacity.errors import DeclarationError, ToolLoadError


def resolve(target: str) -> Any:
    """The object ``target`` (``package.module:attr``, ``attr`` may be dotted) names.

    Raises:
        ToolLoadError: the target is malformed, its module cannot be imported, or it has no
            such attribute; the message names the target.
    """
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ToolLoadError(f"tools target {target!r} is not of the form package.module:attr")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # any import-time error is the target's fault
        raise ToolLoadError(
            f"tools target {target!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ToolLoadError(
                f"tools target {target!r}: {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    return obj


def _members(obj: Any) -> Iterable[Any]:
    if isinstance(obj, list | tuple):
        return obj
    return (obj,)


def register_tools(sagacity: Sagacity, targets: Sequence[str]) -> tuple[str, ...]:
    """Wrap every object the targets name into ``sagacity``; returns the registered names.

    A target names a ``@compensable`` function, an object whose methods are declared, or a
    list/tuple of those.

    Raises:
        ToolLoadError: a target cannot be resolved or declares no tool (names the target).
    """
    if not targets:
        raise ToolLoadError("no tools given: pass --tools package.module:attr at least once")
    for target in targets:
        obj = resolve(target)
        for member in _members(obj):
            if isinstance(member, type):
                raise ToolLoadError(
                    f"tools target {target!r} is a class; name an instance of it (the "
                    "compensations are bound to the object that owns the tools)"
                )
            before = len(sagacity.registry)
            try:
                sagacity.wrap(member)
            except DeclarationError as exc:
                raise ToolLoadError(f"tools target {target!r}: {exc.message}") from exc
            if len(sagacity.registry) == before and tool_definition(member) is None:
                raise ToolLoadError(f"tools target {target!r} declares no new tool")
    return sagacity.registry.names()
