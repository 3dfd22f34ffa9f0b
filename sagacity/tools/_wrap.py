"""``Sagacity.wrap()``: find an object's declared tools, resolve their undo, register them.

Every declaration is checked here, at start-up, so a typo in ``by=`` surfaces now rather than
during a failure, when a refund needs issuing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sagacity.effects._effect_keys import DEFAULT_KEY
from sagacity.errors import DeclarationError
from sagacity.privacy._redaction import redact_paths
from sagacity.tools._decorators import (
    CompensationDefinition,
    Constraint,
    ToolDefinition,
    check_undo_tools,
    compensation_definition,
    tool_definition,
)
from sagacity.tools._frameworks import NOT_A_FRAMEWORK_OBJECT
from sagacity.tools._frameworks import route as route_framework_object
from sagacity.tools._registry import RegisteredTool, ToolRegistry
from sagacity.tools._reversibility import Reversibility
from sagacity.tools._tool import WRAPPED_ATTR, Host, wrap_function
from sagacity.undo._undo import UndoCall

TOOLS_ATTR = "__sagacity_tools__"


class WrappedTools:
    """An object's tools, journaling; every other attribute is the object's own.

    ``__sagacity_tools__`` maps each tool's journaled name to its wrapped callable (what
    framework adapters hand to an agent).
    """

    def __init__(
        self,
        target: object,
        tools: Mapping[str, RegisteredTool],
        by_attribute: Mapping[str, Callable[..., Any]],
    ) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_by_attribute", dict(by_attribute))
        object.__setattr__(
            self, TOOLS_ATTR, MappingProxyType({n: t.wrapped for n, t in tools.items()})
        )

    def __getattr__(self, name: str) -> Any:
        by_attribute: dict[str, Any] = object.__getattribute__(self, "_by_attribute")
        if name in by_attribute:
            return by_attribute[name]
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(object.__getattribute__(self, "_target"))) | {TOOLS_ATTR})

    def __repr__(self) -> str:
        return f"<sagacity tools of {object.__getattribute__(self, '_target')!r}>"


def _members(obj: object) -> Iterator[tuple[str, ToolDefinition]]:
    seen: set[str] = set()
    for klass in type(obj).__mro__:
        for name, raw in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            function = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
            definition = tool_definition(function)
            if definition is not None:
                yield name, definition


def _check_compensation(
    tool: ToolDefinition, target: Callable[..., Any], where: str, *, marked: bool = True
) -> CompensationDefinition:
    definition = compensation_definition(target)
    if definition is None and not marked:
        definition = CompensationDefinition(
            idempotent=False, function=target, is_async=inspect.iscoroutinefunction(target)
        )
    if definition is None:
        raise DeclarationError(
            f"tool {tool.name!r}: by= names {where}, which is not marked @compensation"
        )
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"tool {tool.name!r}: {where} has no signature: {exc}") from exc
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    extra_required = [
        p
        for p in signature.parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    if len(positional) != 1 or extra_required:
        raise DeclarationError(
            f"tool {tool.name!r}: compensation {where} must take exactly one "
            f"CompensationContext argument, but its signature is {signature}"
        )
    return definition


def _resolve_by(
    tool: ToolDefinition, owner: object | None, *, marked: bool = True
) -> tuple[Callable[..., Any] | None, CompensationDefinition | None]:
    by = tool.by
    if by is None:
        return None, None
    if not tool.reversibility.undoable:
        raise DeclarationError(
            f"tool {tool.name!r} is {tool.reversibility.value} and cannot declare by={by!r}: "
            + (
                "a read changes nothing to undo"
                if tool.reversibility.value == "READ"
                else "it is gated for human approval because no undo exists; use "
                "REVERSIBLE or COMPENSATABLE if it has one"
            )
        )
    if callable(by):
        where = f"function {getattr(by, '__qualname__', by)!r}"
        return by, _check_compensation(tool, by, where, marked=marked)
    if owner is not None:
        target = getattr(owner, by, None)
        if target is None:
            available = sorted(
                n for n in dir(type(owner)) if compensation_definition(getattr(owner, n, None))
            )
            raise DeclarationError(
                f"tool {tool.name!r}: by={by!r} names no method of {type(owner).__qualname__}"
                + (f" (compensations found: {', '.join(available)})" if available else "")
            )
        return target, _check_compensation(tool, target, f"method {by!r}")
    target = tool.function.__globals__.get(by)
    if target is None or not callable(target):
        raise DeclarationError(
            f"tool {tool.name!r}: by={by!r} names no function of module "
            f"{tool.function.__module__!r}; define it there or pass the function itself"
        )
    return target, _check_compensation(tool, target, f"function {by!r}")


def _register(
    host: Host,
    registry: ToolRegistry,
    definition: ToolDefinition,
    function: Callable[..., Any],
    owner: object | None,
) -> RegisteredTool:
    compensation, compensation_def = _resolve_by(definition, owner)
    tool = RegisteredTool(
        name=definition.name,
        definition=definition,
        function=function,
        wrapped=wrap_function(host, definition, function),
        compensation=compensation,
        compensation_definition=compensation_def,
    )
    return tool


def wrap(host: Host, registry: ToolRegistry, obj: object) -> Any:
    """Wrap ``obj`` (an instance with declared methods, or a declared function).

    Returns a journaling function for a function, a :class:`WrappedTools` for an object, and
    for an agent framework's tool object the framework's tool, journaling (its adapter's
    ``wrap_tool``); an agent, toolset, graph or MCP server is refused naming the hook to use.

    Raises:
        DeclarationError: nothing to wrap, a ``by=`` that does not resolve, a wrong
            compensation signature, ``by=`` on a tool that cannot have one, or a name clash.
    """
    if getattr(obj, WRAPPED_ATTR, False) or isinstance(obj, WrappedTools):
        raise DeclarationError(f"{obj!r} is already wrapped; wrap the original object once")
    routed = route_framework_object(host, obj)
    if routed is not NOT_A_FRAMEWORK_OBJECT:
        return routed
    definition = tool_definition(obj)
    if definition is not None and callable(obj):
        owner = getattr(obj, "__self__", None)
        tool = _register(host, registry, definition, obj, owner)
        registry.register(tool)
        return tool.wrapped
    if compensation_definition(obj) is not None:
        raise DeclarationError(
            f"{getattr(obj, '__qualname__', obj)!r} is a @compensation, not a tool: wrap the "
            "@compensable tool (or the object holding both) instead"
        )
    if inspect.isfunction(obj) or inspect.ismethod(obj) or isinstance(obj, type) or obj is None:
        what = getattr(obj, "__qualname__", repr(obj))
        hint = (
            "wrap an instance, not the class"
            if isinstance(obj, type)
            else "decorate it with @compensable(...) first"
        )
        raise DeclarationError(f"{what} is not a declared tool: {hint}")
    tools: dict[str, RegisteredTool] = {}
    by_attribute: dict[str, Callable[..., Any]] = {}
    for attribute, declared in _members(obj):
        bound = getattr(obj, attribute)
        tool = _register(host, registry, declared, bound, obj)
        if tool.name in tools:
            raise DeclarationError(
                f"{type(obj).__qualname__} declares two tools named {tool.name!r}"
            )
        tools[tool.name] = tool
        by_attribute[attribute] = tool.wrapped
    if not tools:
        raise DeclarationError(
            f"{type(obj).__qualname__} has no @compensable methods: decorate its tool methods "
            "with @compensable(...) (or @compensable(reversibility=Reversibility.READ) for "
            "reads) before wrapping it"
        )
    registry.register_all(list(tools.values()))
    return WrappedTools(obj, tools, by_attribute)


def wrap_callable(
    host: Host,
    registry: ToolRegistry,
    function: Callable[..., Any],
    *,
    name: str | None,
    reversibility: Reversibility,
    by: Callable[..., Any] | None,
    constraint: Constraint | None,
    undo: UndoCall | None = None,
    redact: Sequence[str] = (),
    undo_tools: Sequence[str] = (),
    effect_key: object = DEFAULT_KEY,
    refuses: Sequence[type[BaseException]] = (),
    grantable: bool = True,
) -> Callable[..., Any]:
    """Declare and wrap an undecorated callable (a framework's tool function) in one step.

    Nothing is set on ``function``.  ``by`` is a callable taking one ``CompensationContext``;
    unless marked ``@compensation(idempotent=True)`` it is treated as not idempotent.

    Raises:
        DeclarationError: as :func:`wrap`, or ``function`` is not callable / has no name.
    """
    if not callable(function):
        raise DeclarationError(f"{function!r} is not callable")
    if getattr(function, WRAPPED_ATTR, False):
        raise DeclarationError(f"{function!r} is already wrapped")
    tool_name = name if name is not None else getattr(function, "__name__", None)
    if not isinstance(tool_name, str) or not tool_name.strip() or tool_name == "<lambda>":
        raise DeclarationError(f"give {function!r} a tool name: name=...")
    if not isinstance(reversibility, Reversibility):
        raise DeclarationError(
            f"reversibility must be a Reversibility member, got {reversibility!r}"
        )
    if by is not None and not callable(by):
        raise DeclarationError(f"by= must be a function here, got {by!r}")
    if constraint is not None and not callable(constraint):
        raise DeclarationError(f"constraint= must be callable, got {constraint!r}")
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"{function!r} has no signature to journal: {exc}") from exc
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        raise DeclarationError(
            f"tool {tool_name!r} takes *args: a payload records arguments by name"
        )
    if undo is not None:
        if by is not None:
            raise DeclarationError(f"tool {tool_name!r}: give by= or an undo call, not both")
        if not reversibility.undoable:
            raise DeclarationError(
                f"tool {tool_name!r} is {reversibility.value} and cannot name an undo call"
            )
    call = getattr(function, "__call__", None)  # noqa: B004 - async callable objects
    definition = ToolDefinition(
        name=tool_name,
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        function=function,
        is_async=inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call),
        undo_call=undo,
        redact=redact_paths(redact, tool=tool_name),
        undo_tools=check_undo_tools(undo_tools, by=by, reversibility=reversibility, tool=tool_name),
        effect_key=effect_key,
        refuses=tuple(refuses),
        grantable=grantable,
    )
    compensation, compensation_def = _resolve_by(definition, None, marked=False)
    tool = RegisteredTool(
        name=tool_name,
        definition=definition,
        function=function,
        wrapped=wrap_function(host, definition, function),
        compensation=compensation,
        compensation_definition=compensation_def,
    )
    registry.register(tool)
    return tool.wrapped
