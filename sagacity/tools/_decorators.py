"""``@compensable`` and ``@compensation``: declare a tool's reversibility and its undo.

Both validate what they can at decoration time, attach a private frozen definition to the
function and return the function itself, so it stays an ordinary callable (in tests, outside
sagas).  What needs the owning object (``by=`` naming a method) is resolved by
:meth:`Sagacity.wrap <sagacity.Sagacity.wrap>`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from sagacity.effects._effect_keys import DEFAULT_KEY, EffectKey, effect_key_of
from sagacity.effects._refusals import Refusals, check_refuses
from sagacity.errors import DeclarationError
from sagacity.privacy._redaction import redact_paths
from sagacity.tools._reversibility import Reversibility
from sagacity.undo._undo import UndoCall

F = TypeVar("F", bound=Callable[..., Any])

Constraint = Callable[[Mapping[str, Any]], "str | None"]
"""A policy predicate over a call's arguments: a refusal reason, or ``None`` to allow it."""

TOOL_ATTR = "__sagacity_tool__"
COMPENSATION_ATTR = "__sagacity_compensation__"


@dataclass(frozen=True, kw_only=True)
class ToolDefinition:
    """What ``@compensable`` declared for one tool function."""

    name: str
    reversibility: Reversibility
    by: str | Callable[..., Any] | None
    constraint: Constraint | None
    function: Callable[..., Any]
    is_async: bool
    undo_call: UndoCall | None = None
    """The undo a policy names by another tool (``None``: ``by``, or a returned undo)."""
    undo_tools: tuple[str, ...] = ()
    """The tools the call's result may name as its undo (a returned undo); a result naming
    any other is never called (docs/adr/0027-operator-signatures.md, undo section)."""
    redact: tuple[str, ...] = ()
    """The payload fields never journaled in clear, as ``$.`` paths (docs/adr/0019-erasure.md
    §5); empty: none."""
    effect_key: object = DEFAULT_KEY
    """The effect key as declared (see :attr:`key`)."""
    refuses: Refusals = ()
    """The exceptions with which the tool refuses a call before acting (journaled ``FAILED``
    with ``refused``: no effect, no compensation; docs/adr/0026-effects-and-refusals.md)."""
    grantable: bool = True
    """Whether an approver may grant the tool for a saga (docs/operations/grants.md);
    ``PRIVILEGED`` tools never can, whatever this says."""
    key: EffectKey | None = field(init=False, default=None)
    """The fields naming the call's effect in its saga (``None``: calls never share one)."""

    def __post_init__(self) -> None:
        names = check_undo_tools(
            self.undo_tools, by=self.by, reversibility=self.reversibility, tool=self.name
        )
        if names and self.undo_call is not None:
            raise DeclarationError(
                f"tool {self.name!r}: give an undo call or undo_tools= (a returned undo), not both"
            )
        object.__setattr__(self, "undo_tools", names)
        object.__setattr__(self, "refuses", check_refuses(self.refuses, tool=self.name))
        key = effect_key_of(
            self.effect_key, reversibility=self.reversibility, redact=self.redact, tool=self.name
        )
        object.__setattr__(self, "key", key)

    def undo_targets(self) -> tuple[str, ...]:
        """Every tool the declaration lets compensation call as this tool's undo."""
        named = (self.undo_call.tool,) if self.undo_call is not None else ()
        return (*named, *self.undo_tools)


@dataclass(frozen=True, kw_only=True)
class CompensationDefinition:
    """What ``@compensation`` declared for one compensation function."""

    idempotent: bool
    function: Callable[..., Any]
    is_async: bool


def tool_definition(obj: object) -> ToolDefinition | None:
    """The ``@compensable`` definition attached to ``obj`` (a function or bound method)."""
    definition = getattr(obj, TOOL_ATTR, None)
    return definition if isinstance(definition, ToolDefinition) else None


def compensation_definition(obj: object) -> CompensationDefinition | None:
    """The ``@compensation`` definition attached to ``obj`` (a function or bound method)."""
    definition = getattr(obj, COMPENSATION_ATTR, None)
    return definition if isinstance(definition, CompensationDefinition) else None


def _check_function(fn: object, decorator: str) -> Callable[..., Any]:
    if isinstance(fn, staticmethod | classmethod):
        raise DeclarationError(
            f"@{decorator} must be applied to the function itself: "
            f"put it below @{type(fn).__name__}"
        )
    if not inspect.isfunction(fn):
        raise DeclarationError(f"@{decorator} decorates functions, got {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise DeclarationError(
            f"@{decorator} cannot decorate generator {fn.__qualname__}: its effect would happen "
            "after the call returned, outside the journal"
        )
    if getattr(fn, TOOL_ATTR, None) is not None or getattr(fn, COMPENSATION_ATTR, None):
        raise DeclarationError(
            f"{fn.__qualname__} is already declared; a function is either one tool or one "
            "compensation, declared once"
        )
    return fn


def check_undo_tools(
    undo_tools: object, *, by: object, reversibility: Reversibility, tool: object = None
) -> tuple[str, ...]:
    """``undo_tools`` as a tuple of tool names, checked against the rest of the declaration.

    Raises:
        DeclarationError: not a collection of non-empty names, or given with ``by=`` or to a
            tool that cannot have an undo.
    """
    where = f"tool {tool!r}: " if isinstance(tool, str) else ""
    if isinstance(undo_tools, str | bytes) or not isinstance(undo_tools, Iterable):
        raise DeclarationError(
            f'{where}undo_tools= is a list of tool names (undo_tools=("release",)), '
            f"got {undo_tools!r}"
        )
    names = tuple(undo_tools)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise DeclarationError(f"{where}undo_tools= names tools by name, got {name!r}")
    if not names:
        return ()
    if by is not None:
        raise DeclarationError(
            f"{where}give by= or undo_tools= (the undo tools its result may name), not both"
        )
    if not reversibility.undoable:
        raise DeclarationError(
            f"{where}a {reversibility.value} tool has no undo: undo_tools= is only for "
            "REVERSIBLE and COMPENSATABLE tools"
        )
    return tuple(dict.fromkeys(names))


def check_declaration(
    *,
    by: object,
    reversibility: object,
    name: object,
    constraint: object,
) -> None:
    """Check the options of a tool declaration (``@compensable`` or a framework adapter).

    Raises:
        DeclarationError: an option is malformed.
    """
    if not isinstance(reversibility, Reversibility):
        raise DeclarationError(
            f"reversibility must be a Reversibility member, got {reversibility!r}"
        )
    if by is not None and not (isinstance(by, str) and by) and not callable(by):
        raise DeclarationError(f"by= must be a method name or a function, got {by!r}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise DeclarationError(f"name= must be a non-empty str, got {name!r}")
    if constraint is not None and not callable(constraint):
        raise DeclarationError(f"constraint= must be callable, got {constraint!r}")


def define_tool(
    function: Callable[..., Any],
    *,
    by: str | Callable[..., Any] | None = None,
    reversibility: Reversibility = Reversibility.COMPENSATABLE,
    name: str | None = None,
    constraint: Constraint | None = None,
    redact: Iterable[str] = (),
    undo_tools: Iterable[str] = (),
    undo: UndoCall | None = None,
    effect_key: object = DEFAULT_KEY,
    refuses: Iterable[type[BaseException]] = (),
    grantable: bool = True,
) -> ToolDefinition:
    """The definition ``@compensable(...)`` would attach to ``function``, without attaching it.

    Framework adapters use it for tools declared by options rather than by the decorator.

    Raises:
        DeclarationError: an option is malformed, or ``function`` takes ``*args``.
    """
    check_declaration(by=by, reversibility=reversibility, name=name, constraint=constraint)
    tool_name = name if name is not None else function.__name__
    undo_names = check_undo_tools(undo_tools, by=by, reversibility=reversibility, tool=tool_name)
    paths = redact_paths(redact, tool=tool_name)
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise DeclarationError(
                f"tool {function.__qualname__} takes *{parameter.name}: a tool's payload "
                "records arguments by name, so *args cannot be replayed; use named "
                "parameters"
            )
    return ToolDefinition(
        name=tool_name,
        reversibility=reversibility,
        by=by,
        constraint=constraint,
        function=function,
        is_async=inspect.iscoroutinefunction(function),
        redact=paths,
        undo_tools=undo_names,
        undo_call=_check_undo_call(undo, by=by, reversibility=reversibility, tool=tool_name),
        effect_key=effect_key,
        refuses=check_refuses(refuses, tool=tool_name),
        grantable=grantable,
    )


def _check_undo_call(
    undo: object, *, by: object, reversibility: Reversibility, tool: str | None
) -> UndoCall | None:
    where = f"tool {tool!r}: " if tool is not None else ""
    if undo is None:
        return None
    if not isinstance(undo, UndoCall):
        raise DeclarationError(f"{where}undo= takes an UndoCall(tool=..., arguments=...)")
    if by is not None:
        raise DeclarationError(f"{where}give by= or an undo call, not both")
    if not reversibility.undoable:
        raise DeclarationError(
            f"{where}a {reversibility.value} tool has no undo: undo= is only for REVERSIBLE "
            "and COMPENSATABLE tools"
        )
    return undo


@overload
def compensable(fn: F, /) -> F: ...
@overload
def compensable(
    *,
    by: str | Callable[..., Any] | None = None,
    reversibility: Reversibility = Reversibility.COMPENSATABLE,
    name: str | None = None,
    constraint: Constraint | None = None,
    redact: Iterable[str] = (),
    undo_tools: Iterable[str] = (),
    undo: UndoCall | None = None,
    effect_key: Iterable[str] | object | None = DEFAULT_KEY,
    refuses: Iterable[type[BaseException]] = (),
    grantable: bool = True,
) -> Callable[[F], F]: ...
def compensable(
    fn: F | None = None,
    /,
    *,
    by: str | Callable[..., Any] | None = None,
    reversibility: Reversibility = Reversibility.COMPENSATABLE,
    name: str | None = None,
    constraint: Constraint | None = None,
    redact: Iterable[str] = (),
    undo_tools: Iterable[str] = (),
    undo: UndoCall | None = None,
    effect_key: Iterable[str] | object | None = DEFAULT_KEY,
    refuses: Iterable[type[BaseException]] = (),
    grantable: bool = True,
) -> Any:
    """Declare a tool: journaled inside sagas, compensated or gated by its reversibility.

    Args:
        by: the compensation: the name of a ``@compensation`` method of the same object (or,
            for a module-level tool, a ``@compensation`` function of its module, by name or
            the function itself).  Resolved by ``Sagacity.wrap()``.  Only for ``REVERSIBLE``
            and ``COMPENSATABLE`` tools; without it, a tool may return its own undo
            (``{"undo": {"tool": ..., "arguments": {...}}}`` or an :class:`~sagacity.Undo`)
            naming one of ``undo_tools``.
        reversibility: see :class:`~sagacity.Reversibility`; ``COMPENSATABLE`` by default.
        name: the tool's journaled name (defaults to the function's name); unique per
            ``Sagacity``.
        constraint: a policy predicate over the call's arguments returning a refusal reason
            (or ``None``); a refused call is journaled ``CONSTRAINT_VIOLATED`` and never runs,
            whatever the approvals.
        redact: payload fields never journaled in clear (``"card_number"``, or a
            ``"$.customer.iban"`` path into nested objects): each value is replaced by its
            salted redaction key before the payload is committed, sealed or hashed
            (docs/adr/0019-erasure.md §5).  Needs a journal that seals (a key service,
            ``SAGACITY_KEY_ENCRYPTION_KEY_FILE``): wrapping refuses the tool otherwise.
        undo_tools: the registered tools the call's result may name as its undo (a returned
            undo).  Compensation calls a returned undo only when it names one of these, and
            each must be ungated (never ``IRREVERSIBLE`` or ``PRIVILEGED``: registering one
            that is fails).  Not with ``by=``.
        undo: another registered tool that undoes the call, with arguments taken from the
            call and its result (:class:`~sagacity.UndoCall`); compensation renders them from
            the journaled call and result.  Not with ``by=`` or ``undo_tools``; never a gated
            tool.
        grantable: ``False``: no approver may grant the tool for a saga (a standing grant,
            docs/operations/grants.md); each call needs its own approval.

    Raises:
        DeclarationError: the declaration is malformed (checked now, not at call time).
    """
    check_declaration(by=by, reversibility=reversibility, name=name, constraint=constraint)
    undo_names = check_undo_tools(undo_tools, by=by, reversibility=reversibility, tool=name)
    _check_undo_call(undo, by=by, reversibility=reversibility, tool=name)
    paths = redact_paths(redact, tool=name)
    refusals = check_refuses(refuses, tool=name)
    effect_key_of(effect_key, reversibility=reversibility, redact=paths, tool=name)

    def decorate(target: F) -> F:
        function = _check_function(target, "compensable")
        definition = define_tool(
            function,
            by=by,
            reversibility=reversibility,
            name=name,
            constraint=constraint,
            redact=paths,
            undo_tools=undo_names,
            undo=undo,
            effect_key=effect_key,
            refuses=refusals,
            grantable=bool(grantable),
        )
        setattr(function, TOOL_ATTR, definition)
        return target

    if fn is not None:
        return decorate(fn)
    return decorate


@overload
def compensation(fn: F, /) -> F: ...
@overload
def compensation(*, idempotent: bool = False) -> Callable[[F], F]: ...
def compensation(fn: F | None = None, /, *, idempotent: bool = False) -> Any:
    """Mark a function as a compensation: it takes exactly one ``CompensationContext``.

    Usable bare (``@compensation``) or with options (``@compensation(idempotent=True)``).

    Args:
        idempotent: running it twice has the effect of running it once (it keys its work on
            ``context.idempotency_key``).  Only an idempotent compensation is retried after a
            crash left its ``COMPENSATION_INTENT`` without an outcome; otherwise the step is
            reported ``SUSPECT`` for a person.

    Raises:
        DeclarationError: not a function, or not one that could take a single context.
    """
    if not isinstance(idempotent, bool):
        raise DeclarationError(f"idempotent= must be a bool, got {idempotent!r}")

    def decorate(target: F) -> F:
        function = _check_function(target, "compensation")
        required = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if not 1 <= len(required) <= 2:
            raise DeclarationError(
                f"compensation {function.__qualname__} must take exactly one "
                "CompensationContext argument (plus self for a method)"
            )
        definition = CompensationDefinition(
            idempotent=idempotent,
            function=function,
            is_async=inspect.iscoroutinefunction(function),
        )
        setattr(function, COMPENSATION_ATTR, definition)
        return target

    if fn is not None:
        return decorate(fn)
    return decorate
