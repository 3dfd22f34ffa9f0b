"""Refusals: a tool that says no before acting has no effect, so it is no failed step.

A tool may refuse a call before doing anything: the arguments are wrong, the order is already
closed, the model should ask again differently.  Frameworks have a signal for it (Pydantic
AI's ``ModelRetry`` / ``ToolFailed``: "fix your arguments and call again"), and a tool may
declare its own (``@compensable(refuses=(OutOfStock,))``, a policy's ``refuses = [...]``).
Such a call is journaled ``FAILED`` with ``refused`` (``retry`` or ``declared``): nothing to
undo, nothing that makes the saga compensate, and the model may call again
(docs/adr/0026-effects-and-refusals.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from sagacity.errors import DeclarationError

REFUSED_RETRY = "retry"
"""``refused`` of a framework's retry signal (the call is to be made again, corrected)."""
REFUSED_DECLARED = "declared"
"""``refused`` of an exception the tool's declaration names as its refusal."""

Refusals = tuple[type[BaseException], ...]


def check_refuses(refuses: object, *, tool: str | None = None) -> Refusals:
    """``refuses`` as a tuple of exception classes.

    Raises:
        DeclarationError: not a collection of ``Exception`` subclasses (an interruption such
            as ``KeyboardInterrupt`` is never a refusal: the call may have acted).
    """
    where = f"tool {tool!r}: " if tool else ""
    if isinstance(refuses, type | str) or not isinstance(refuses, Iterable):
        raise DeclarationError(
            f"{where}refuses is a list of exception classes (refuses=(OutOfStock,)), "
            f"got {refuses!r}"
        )
    classes = tuple(refuses)
    for cls in classes:
        if not isinstance(cls, type) or not issubclass(cls, Exception):
            raise DeclarationError(
                f"{where}refuses names exception classes (subclasses of Exception), got {cls!r}"
            )
    return tuple(dict.fromkeys(classes))


def refusal_of(exc: BaseException, declared: Refusals, signals: Refusals = ()) -> str | None:
    """The ``refused`` kind of ``exc`` raised by a tool (``None``: a failure).

    ``signals``: the calling framework's retry signals; ``declared``: the tool's own.
    """
    if signals and isinstance(exc, signals):
        return REFUSED_RETRY
    if declared and isinstance(exc, declared):
        return REFUSED_DECLARED
    return None
