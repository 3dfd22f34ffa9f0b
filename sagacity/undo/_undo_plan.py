"""Which undo compensation calls for one executed step, from the runner's own declarations.

Every agent can write its own saga, so nothing a step's entries say about its undo is taken
as an instruction: the step's tool must be registered with the runner, its reversibility is
the runner's declaration of it (never the journaled ``reversibility`` attribute), and the
undo is what that declaration says (docs/adr/0027-operator-signatures.md, "Undo"):

* a compensation (``by=``), called with the step's :class:`CompensationContext`;
* a named undo (:class:`~sagacity.UndoCall`), its arguments rendered again from the
  journaled call (the ``INTENT``'s payload) and result;
* a returned undo, read again from the journaled result, that names one of the tools the
  declaration lists in ``undo_tools``.

The undo tool must be registered and ungated (never ``IRREVERSIBLE`` or ``PRIVILEGED``).  The
``undo_tool`` / ``undo_arguments`` attributes of ``EXECUTED`` are information for people only.
Anything else is a :class:`NoUndo` with a named cause, journaled ``COMPENSATION_FAILED``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import SerializationError
from sagacity.tools._codec import decode_payload, decode_result, dumps, result_data
from sagacity.tools._registry import RegisteredTool, ToolRegistry
from sagacity.undo._context import CompensationContext
from sagacity.undo._undo import Undo, journaled_undo, undo_declared

CAUSE_ERROR = "error"
"""The undo was called and raised (tried again on the next run)."""
CAUSE_NO_UNDO = "no_undo"
"""No undo exists: a gated tool, a result saying so, a named undo that cannot be rendered."""
CAUSE_UNDECLARED = "undeclared"
"""The step's tool declares no undo (no ``by=``, no named undo, no ``undo_tools``)."""
CAUSE_UNREGISTERED = "unregistered"
"""The step's tool, or its undo tool, is not registered here (tried again on the next run)."""
CAUSE_UNDECLARED_UNDO = "undeclared_undo"
"""The result names an undo tool the step's tool does not declare, or carries none to read."""
CAUSE_GATED_UNDO = "gated_undo"
"""The undo tool is ``IRREVERSIBLE`` or ``PRIVILEGED``: it never runs without approval."""

FINAL_CAUSES = frozenset({CAUSE_NO_UNDO, CAUSE_UNDECLARED, CAUSE_UNDECLARED_UNDO, CAUSE_GATED_UNDO})
"""Causes a later run does not try again: the step stays dirty for a person."""


@dataclass(frozen=True, kw_only=True)
class PlannedUndo:
    """The call that undoes a step.

    Attributes:
        target: the compensation's or undo tool's name (journaled on ``COMPENSATION_INTENT``).
        function: the callable; ``args`` / ``kwargs`` its arguments.
        payload: the undo tool's arguments as JSON (``None`` for a ``by=`` compensation).
        idempotent: the compensation is declared idempotent.
    """

    target: str
    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    payload: str | None = None
    idempotent: bool = False


@dataclass(frozen=True, kw_only=True)
class NoUndo:
    """Why a step is not undone: a cause from this module and a reason for a person."""

    cause: str
    reason: str


def journaled_reversibility_note(step: JournalEntry, tool: RegisteredTool | None) -> str:
    """`` (journaled as X; ...)`` when the step's journaled reversibility is not the one the
    runner declares (or the runner declares none): a writer's claim, reported, not used."""
    journaled = step.attributes.get(attr.REVERSIBILITY)
    if journaled is None or (tool is not None and journaled == tool.reversibility.value):
        return ""
    if tool is None:
        return f" (the journal says {journaled}; that is not taken on the writer's word)"
    return (
        f" (the journal says {journaled}; this runner's declaration, "
        f"{tool.reversibility.value}, is what counts)"
    )


def call_of(step: JournalEntry, intent: JournalEntry | None) -> JournalEntry | None:
    """The ``INTENT`` that journaled the step's call: ``intent`` if it is the step's tool's."""
    if intent is None or intent.event_type is not EventType.INTENT or intent.tool != step.tool:
        return None
    return intent


def _arguments(intent: JournalEntry | None) -> tuple[str, dict[str, Any]]:
    payload = intent.payload if intent is not None and intent.payload is not None else ""
    try:
        return payload, decode_payload(payload) if payload else {}
    except SerializationError:
        return payload, {}


def context_of(step: JournalEntry, intent: JournalEntry | None) -> CompensationContext:
    """What a ``by=`` compensation sees of ``step`` (its call read from ``intent``)."""
    payload, arguments = _arguments(call_of(step, intent))
    encoding = step.attributes.get(attr.RESULT_ENCODING)
    try:
        returned = journaled_undo(result_data(step.result, encoding))
    except SerializationError:
        returned = None
    return CompensationContext(
        saga_id=step.saga_id,
        seq=step.seq,
        tool=step.tool or "",
        arguments=arguments,
        payload=payload,
        result=decode_result(step.result, encoding),
        result_text=step.result,
        idempotency_key=f"{step.saga_id}:{step.seq}",
        undo_arguments=dict(returned.arguments) if isinstance(returned, Undo) else None,
    )


def plan_undo(
    registry: ToolRegistry, tool: RegisteredTool, step: JournalEntry, intent: JournalEntry | None
) -> PlannedUndo | NoUndo:
    """The undo of ``step`` (an ``EXECUTED``, or an ``INTENT`` a person settled executed) of
    the registered ``tool``, from ``tool``'s declaration alone."""
    note = journaled_reversibility_note(step, tool)
    declared = tool.reversibility
    if declared.gated:
        return NoUndo(
            cause=CAUSE_NO_UNDO,
            reason=f"{declared.value} tool executed after approval: no undo exists{note}",
        )
    if tool.compensation is not None:
        definition = tool.compensation_definition
        return PlannedUndo(
            target=getattr(tool.compensation, "__name__", None) or repr(tool.compensation),
            function=tool.compensation,
            args=(context_of(step, intent),),
            idempotent=bool(definition and definition.idempotent),
        )
    undo_call = tool.definition.undo_call
    if undo_call is not None:
        _, arguments = _arguments(call_of(step, intent))
        result = result_data(step.result, step.attributes.get(attr.RESULT_ENCODING))
        try:
            undo = undo_call.render(arguments=arguments, result=result)
        except SerializationError as exc:
            return NoUndo(
                cause=CAUSE_NO_UNDO,
                reason=f"the declared undo {undo_call.tool!r} cannot be made: {exc.message}",
            )
        return _undo_tool_call(registry, tool, undo, declared_by="names")
    return _returned(registry, tool, step, note)


def _returned(
    registry: ToolRegistry, tool: RegisteredTool, step: JournalEntry, note: str
) -> PlannedUndo | NoUndo:
    """The undo ``step``'s journaled result carries, if ``tool`` declares it may return it."""
    try:
        found = journaled_undo(result_data(step.result, step.attributes.get(attr.RESULT_ENCODING)))
    except SerializationError:  # an undo with an empty tool name: none to read
        found = _NOTHING
    if found is None and undo_declared(found):
        return NoUndo(
            cause=CAUSE_NO_UNDO, reason="the tool reported that no undo exists for this effect"
        )
    named = step.attributes.get(attr.UNDO_TOOL)
    if isinstance(found, Undo):
        if found.tool not in tool.definition.undo_tools:
            allowed = ", ".join(repr(t) for t in tool.definition.undo_tools) or "none"
            return NoUndo(
                cause=CAUSE_UNDECLARED_UNDO,
                reason=(
                    f"the result names undo tool {found.tool!r}, which tool {tool.name!r} does "
                    f"not declare (its undo_tools: {allowed}); it is not called"
                ),
            )
        return _undo_tool_call(registry, tool, found, declared_by="lists")
    if tool.definition.undo_tools:
        return NoUndo(
            cause=CAUSE_UNDECLARED_UNDO,
            reason=f"the journaled result of {tool.name!r} carries no undo to read",
        )
    if named is not None:
        return NoUndo(
            cause=CAUSE_UNDECLARED_UNDO,
            reason=(
                f"the journal names undo tool {named!r}, but tool {tool.name!r} declares no "
                f"undo it may return (no undo_tools); it is not called{note}"
            ),
        )
    return NoUndo(
        cause=CAUSE_UNDECLARED,
        reason=f"no compensation declared (no by=, no undo, no undo_tools){note}",
    )


_NOTHING = object()
"""A result that carries no undo that can be read."""


def _undo_tool_call(
    registry: ToolRegistry, tool: RegisteredTool, undo: Undo, *, declared_by: str
) -> PlannedUndo | NoUndo:
    target = registry.get(undo.tool)
    if target is None:
        return NoUndo(
            cause=CAUSE_UNREGISTERED,
            reason=(
                f"undo tool {undo.tool!r} (which {tool.name!r} {declared_by}) is not "
                "registered here"
            ),
        )
    if target.reversibility.gated:
        return NoUndo(
            cause=CAUSE_GATED_UNDO,
            reason=(
                f"undo tool {undo.tool!r} is {target.reversibility.value}: an undo runs "
                "without approval, so a gated tool is never called as one"
            ),
        )
    arguments = dict(undo.arguments)
    try:
        payload = dumps(arguments)
    except (TypeError, ValueError) as exc:
        return NoUndo(cause=CAUSE_NO_UNDO, reason=f"the undo's arguments are not JSON: {exc}")
    return PlannedUndo(
        target=undo.tool, function=target.function, kwargs=arguments, payload=payload
    )
