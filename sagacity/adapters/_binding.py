"""What every framework adapter shares: bind a tool's function to a ``Sagacity``.

A framework tool wraps a plain function; the framework parses the model's arguments, calls the
function, and catches what it raises.  :func:`bind` returns a journaling stand-in for that
function with the same signature, so the framework builds the same schema and calls it the same
way, while every call inside a saga is journaled (or gated) by the core's hot path.

The payload is the model-visible arguments only: framework context parameters (a run context,
callbacks, injected arguments) are neither journaled nor replayed.  Values the framework has
already parsed (pydantic models, dates) are journaled in their JSON form and validated back
into their annotated types when a resume or an undo replays the payload.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

from sagacity.effects._refusals import Refusals
from sagacity.errors import DeclarationError
from sagacity.saga._saga import Sagacity
from sagacity.tools._codec import call_arguments
from sagacity.tools._decorators import (
    Constraint,
    ToolDefinition,
    check_undo_tools,
    define_tool,
    tool_definition,
)
from sagacity.tools._registry import RegisteredTool
from sagacity.tools._reversibility import Reversibility
from sagacity.tools._tool import WRAPPED_ATTR, journaled_call, journaled_call_async
from sagacity.tools._wrap import _resolve_by


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """A tool's declaration given to an adapter instead of ``@compensable`` on its function.

    The fields mean what ``@compensable``'s options mean; ``reversibility`` is required, so a
    tool is never journaled under a default nobody chose.
    """

    reversibility: Reversibility
    by: str | Callable[..., Any] | None = None
    constraint: Constraint | None = None
    name: str | None = None
    undo_tools: tuple[str, ...] = ()


def declaration(
    *,
    reversibility: Reversibility | None,
    by: str | Callable[..., Any] | None,
    constraint: Constraint | None,
    name: str | None,
    undo_tools: Sequence[str] = (),
) -> Declaration | None:
    """The adapter options as a :class:`Declaration` (``None`` when none was given).

    Raises:
        DeclarationError: ``by``/``constraint``/``name``/``undo_tools`` given without
            ``reversibility``, or ``undo_tools`` malformed.
    """
    if reversibility is None:
        if by is not None or constraint is not None or name is not None or undo_tools:
            raise DeclarationError(
                "by=, constraint=, name= and undo_tools= complete a declaration: pass "
                "reversibility= too (or declare the function with @compensable)"
            )
        return None
    return Declaration(
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        name=name,
        undo_tools=check_undo_tools(undo_tools, by=by, reversibility=reversibility, tool=name),
    )


def check_sagacity(sagacity: object) -> Sagacity:
    """``sagacity`` if it is a :class:`~sagacity.Sagacity`.

    Raises:
        DeclarationError: it is not.
    """
    if not isinstance(sagacity, Sagacity):
        raise DeclarationError(
            f"the first argument must be the Sagacity that runs the sagas, got {sagacity!r}"
        )
    return sagacity


def _definition(
    function: Callable[..., Any], tool_name: str, declared: Declaration | None
) -> ToolDefinition:
    decorated = tool_definition(function)
    if decorated is not None and declared is not None:
        raise DeclarationError(
            f"tool {tool_name!r} is declared twice: its function carries @compensable and "
            "reversibility= was passed to the adapter; keep one"
        )
    if decorated is not None:
        return decorated
    if declared is None:
        raise DeclarationError(
            f"tool {tool_name!r} has no declaration: decorate its function with "
            "@compensable(...) or pass reversibility= (and by=) to wrap_tool"
        )
    return define_tool(
        function,
        reversibility=declared.reversibility,
        by=declared.by,
        constraint=declared.constraint,
        name=declared.name or tool_name,
        undo_tools=declared.undo_tools,
    )


def _validators(
    function: Callable[..., Any], parameters: Collection[inspect.Parameter]
) -> dict[str, TypeAdapter[Any] | None]:
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:
        # Unresolvable annotations: the payload is replayed as journaled.
        hints = {}
    validators: dict[str, TypeAdapter[Any] | None] = {}
    for parameter in parameters:
        hint = hints.get(parameter.name)
        adapter: TypeAdapter[Any] | None = None
        if hint is not None:
            try:
                adapter = TypeAdapter(hint)
            except Exception:
                adapter = None
        validators[parameter.name] = adapter
    return validators


def _jsonable(value: object) -> object:
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError:
        # Left as is: the core refuses it with a SerializationError naming the tool.
        return value


@dataclass(frozen=True, kw_only=True)
class Binding:
    """A framework tool's function bound to a ``Sagacity``.

    Attributes:
        definition: the tool's declaration (from ``@compensable`` or the adapter's options).
        journaling: the stand-in to give the framework in place of the function.
        registered: the tool as registered for resume and compensation.
    """

    definition: ToolDefinition
    journaling: Callable[..., Any]
    registered: RegisteredTool

    @property
    def name(self) -> str:
        """The journaled name."""
        return self.definition.name


def _replay(
    function: Callable[..., Any],
    name: str,
    validators: Mapping[str, TypeAdapter[Any] | None],
    missing: Collection[str],
) -> Callable[..., Any]:
    """The callable resume and undo use: payload arguments in, the tool's function called."""

    def replay(**arguments: Any) -> Any:
        if missing:
            raise DeclarationError(
                f"tool {name!r} cannot be replayed outside its framework: parameter(s) "
                f"{', '.join(sorted(missing))} are supplied by the framework at run time"
            )
        values = {}
        for key, value in arguments.items():
            validator = validators.get(key)
            values[key] = validator.validate_python(value) if validator is not None else value
        return function(**values)

    return replay


def journaling_for(
    sagacity: Sagacity,
    definition: ToolDefinition,
    function: Callable[..., Any],
    payload_parameters: Collection[str],
    *,
    refuses: Refusals = (),
) -> Callable[..., Any]:
    """A stand-in for ``function`` journaling its calls as ``definition``, unregistered.

    :func:`bind` uses it for the tool's function; an adapter uses it directly for a second
    function of the same tool (a framework tool with both a sync and an async function).
    Its result goes to a model: a replayed call returns its line with the recorded result;
    ``refuses``: the framework's signals that the tool refused before acting.
    """
    signature = inspect.signature(function)
    names = frozenset(payload_parameters)

    def arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        bound = call_arguments(signature, args, kwargs)
        return {
            k: _jsonable(v) for k, v in bound.items() if k in names or k not in signature.parameters
        }

    journaling: Callable[..., Any]
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def journaling_async(*args: Any, **kwargs: Any) -> Any:
            return await journaled_call_async(
                sagacity,
                definition,
                lambda: arguments(args, kwargs),
                lambda: function(*args, **kwargs),
                refuses=refuses,
                told=True,
            )

        journaling = journaling_async
    else:

        @functools.wraps(function)
        def journaling_sync(*args: Any, **kwargs: Any) -> Any:
            return journaled_call(
                sagacity,
                definition,
                lambda: arguments(args, kwargs),
                lambda: function(*args, **kwargs),
                refuses=refuses,
                told=True,
            )

        journaling = journaling_sync
    setattr(journaling, WRAPPED_ATTR, True)
    return journaling


def bind(
    sagacity: Sagacity,
    function: Callable[..., Any],
    *,
    tool_name: str,
    payload_parameters: Collection[str],
    declared: Declaration | None,
    refuses: Refusals = (),
) -> Binding:
    """Bind ``function`` (a framework tool's) to ``sagacity`` and register it.

    Args:
        sagacity: the ``Sagacity`` whose sagas journal the tool's calls.
        function: the tool's own function, as the framework would call it.
        tool_name: the framework's name for the tool (the journaled name unless the
            declaration names it).
        payload_parameters: the parameters the model supplies; every other parameter is the
            framework's (context, callbacks, injected values) and is not journaled.
        declared: the adapter's declaration, when the function carries no ``@compensable``.
        refuses: the framework's signals that a tool refused a call before acting.

    Raises:
        DeclarationError: no declaration or two, a malformed one, a ``by=`` that does not
            resolve, a gated tool that could not be resumed (a framework parameter without a
            default), a function already wrapped, or a name another tool uses.
    """
    if not callable(function):
        raise DeclarationError(f"tool {tool_name!r} has no function to wrap: {function!r}")
    if getattr(function, WRAPPED_ATTR, False):
        raise DeclarationError(
            f"tool {tool_name!r} is already wrapped; wrap the framework's original tool once"
        )
    definition = _definition(function, tool_name, declared)
    registered = register_function(
        sagacity,
        function,
        definition,
        payload_parameters=payload_parameters,
        marked=tool_definition(function) is not None,
        refuses=refuses,
    )
    return Binding(definition=definition, journaling=registered.wrapped, registered=registered)


def register_function(
    sagacity: Sagacity,
    function: Callable[..., Any],
    definition: ToolDefinition,
    *,
    payload_parameters: Collection[str],
    marked: bool,
    refuses: Refusals = (),
) -> RegisteredTool:
    """Register ``function`` (a framework tool's) as ``definition`` for resume and undo.

    ``marked``: the declaration is the function's own ``@compensable``, whose ``by=`` must
    name a ``@compensation``; a compensation given otherwise need not be marked.

    Raises:
        DeclarationError: a gated tool that could not be resumed (a framework parameter
            without a default), a ``by=`` that does not resolve, or a name another tool uses.
    """
    signature = inspect.signature(function)
    payload = [p for p in signature.parameters.values() if p.name in payload_parameters]
    framework = [
        p
        for p in signature.parameters.values()
        if p.name not in payload_parameters
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        and p.default is p.empty
    ]
    missing = [p.name for p in framework]
    if missing and definition.reversibility.gated:
        raise DeclarationError(
            f"tool {definition.name!r} is {definition.reversibility.value}: an approved call is "
            "resumed outside the agent run, where the framework cannot supply "
            f"{', '.join(missing)}; give the parameter(s) a default or take them out of the tool"
        )
    owner = getattr(function, "__self__", None)
    compensation, compensation_definition = _resolve_by(definition, owner, marked=marked)
    names = frozenset(p.name for p in payload)
    journaling = journaling_for(sagacity, definition, function, names, refuses=refuses)
    registered = RegisteredTool(
        name=definition.name,
        definition=definition,
        function=_replay(function, definition.name, _validators(function, payload), missing),
        wrapped=journaling,
        compensation=compensation,
        compensation_definition=compensation_definition,
    )
    sagacity.registry.register(registered)
    return registered
