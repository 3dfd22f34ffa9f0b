"""The one ``--tools`` loader every service uses: ``package.module:attr`` targets to tools.

A target names a ``@compensable`` function, an object whose methods are declared, a class
(instantiated without arguments), or a list/tuple of those.  Targets import with the working
directory on the import path, so ``--tools myapp.tools:Bank`` works from the application's
checkout as it does installed.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sagacity.errors import DeclarationError, ToolLoadError
from sagacity.saga._saga import Sagacity
from sagacity.tools._decorators import tool_definition


def _cwd_on_path() -> None:
    cwd = str(Path.cwd())
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def resolve(target: str) -> Any:
    """The object ``target`` (``package.module:attr``, ``attr`` may be dotted) names.

    Raises:
        ToolLoadError: the target is malformed, its module cannot be imported, or it has no
            such attribute; the message names the target.
    """
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ToolLoadError(f"tools target {target!r} is not of the form package.module:attr")
    _cwd_on_path()
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


def _instance(target: str, member: Any) -> Any:
    if not isinstance(member, type):
        return member
    try:
        return member()
    except Exception as exc:  # the class's constructor is the target's code
        raise ToolLoadError(
            f"tools target {target!r} is a class that cannot be instantiated without arguments "
            f"({type(exc).__name__}: {exc}); name an instance of it instead"
        ) from exc


def import_tools(targets: Iterable[str]) -> None:
    """Import what the targets name, making no instance: a service checks its ``--tools``
    this way before it connects to anything (its key store included).

    Raises:
        ToolLoadError: a target cannot be resolved.
    """
    for target in targets:
        resolve(target)


def load_tools(targets: Iterable[str]) -> list[Any]:
    """The tool objects the targets name: classes instantiated, lists flattened.

    Raises:
        ToolLoadError: a target cannot be resolved, or names a class that cannot be
            instantiated without arguments.
    """
    return [_instance(t, member) for t in targets for member in _members(resolve(t))]


def register_tools(
    sagacity: Sagacity, targets: Sequence[str], *, required: bool = True
) -> tuple[str, ...]:
    """Wrap every object the targets name into ``sagacity``; returns the registered names.

    Raises:
        ToolLoadError: ``required`` and no target given; a target cannot be loaded or declares
            no tool (names the target).
    """
    if required and not targets:
        raise ToolLoadError("no tools given: pass --tools package.module:attr at least once")
    for target in targets:
        for member in load_tools([target]):
            before = len(sagacity.registry)
            try:
                sagacity.wrap(member)
            except DeclarationError as exc:
                raise ToolLoadError(f"tools target {target!r}: {exc.message}") from exc
            if len(sagacity.registry) == before and tool_definition(member) is None:
                raise ToolLoadError(f"tools target {target!r} declares no new tool")
    return sagacity.registry.names()
