"""What a compensation sees of the step it undoes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class CompensationContext:
    """The step being undone, read back from the journal.

    Attributes:
        saga_id: the saga.
        seq: the step's ``EXECUTED`` entry.
        tool: the tool that ran.
        arguments: the call's arguments, decoded from ``payload``.
        payload: the exact payload journaled with the ``INTENT``.
        result: the tool's result, decoded (JSON results as values, text as text).
        result_text: the result exactly as journaled.
        idempotency_key: ``"{saga_id}:{seq}"``: key external undo calls on it, so a retried
            compensation cannot act twice.
        undo_arguments: for a write that returned its own undo, the arguments of that undo.
    """

    saga_id: str
    seq: int
    tool: str
    arguments: Mapping[str, Any]
    payload: str
    result: Any
    result_text: str | None
    idempotency_key: str
    undo_arguments: Mapping[str, Any] | None = None
