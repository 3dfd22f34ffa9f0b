"""Sagacity: compensation, human approval gates and a verifiable evidence chain for the tools
AI agents call."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagacity._compensation import CompensationCall, CompensationReport, CompensationRunner
    from sagacity._context import CompensationContext
    from sagacity._decision_signature import DecisionSigner, DecisionVerifier
    from sagacity._decorators import compensable, compensation
    from sagacity._events import (
        GENESIS_HASH,
        AnyEventType,
        EntryDraft,
        EventType,
        JournalEntry,
        UnknownEventType,
        event_type_of,
    )
    from sagacity._memory import InMemoryJournal
    from sagacity._registry import RegisteredTool, ToolRegistry
    from sagacity._result import SagaResult, SagaStatus, Step
    from sagacity._reversibility import Reversibility
    from sagacity._run import SagaRun
    from sagacity._saga import Sagacity
    from sagacity._undo import Undo, UndoCall
    from sagacity.chain import BreakReason, ChainVerdict, verify
    from sagacity.errors import SagacityError
    from sagacity.journal import ApprovalRequest, Journal

# Each public name and the module defining it: imported on first use, so ``import sagacity``
# (and every ``sagacity`` command) starts without loading the whole core.
_EXPORTS = {
    "AnyEventType": "sagacity._events",
    "ApprovalRequest": "sagacity.journal",
    "BreakReason": "sagacity.chain",
    "ChainVerdict": "sagacity.chain",
    "CompensationCall": "sagacity._compensation",
    "CompensationContext": "sagacity._context",
    "CompensationReport": "sagacity._compensation",
    "CompensationRunner": "sagacity._compensation",
    "DecisionSigner": "sagacity._decision_signature",
    "DecisionVerifier": "sagacity._decision_signature",
    "EntryDraft": "sagacity._events",
    "EventType": "sagacity._events",
    "GENESIS_HASH": "sagacity._events",
    "InMemoryJournal": "sagacity._memory",
    "Journal": "sagacity.journal",
    "JournalEntry": "sagacity._events",
    "RegisteredTool": "sagacity._registry",
    "Reversibility": "sagacity._reversibility",
    "SagaResult": "sagacity._result",
    "SagaRun": "sagacity._run",
    "SagaStatus": "sagacity._result",
    "Sagacity": "sagacity._saga",
    "SagacityError": "sagacity.errors",
    "Step": "sagacity._result",
    "ToolRegistry": "sagacity._registry",
    "Undo": "sagacity._undo",
    "UndoCall": "sagacity._undo",
    "UnknownEventType": "sagacity._events",
    "compensable": "sagacity._decorators",
    "compensation": "sagacity._decorators",
    "event_type_of": "sagacity._events",
    "verify": "sagacity.chain",
}

__all__ = [
    "GENESIS_HASH",
    "AnyEventType",
    "ApprovalRequest",
    "BreakReason",
    "ChainVerdict",
    "CompensationCall",
    "CompensationContext",
    "CompensationReport",
    "CompensationRunner",
    "DecisionSigner",
    "DecisionVerifier",
    "EntryDraft",
    "EventType",
    "InMemoryJournal",
    "Journal",
    "JournalEntry",
    "RegisteredTool",
    "Reversibility",
    "SagaResult",
    "SagaRun",
    "SagaStatus",
    "Sagacity",
    "SagacityError",
    "Step",
    "ToolRegistry",
    "Undo",
    "UndoCall",
    "UnknownEventType",
    "compensable",
    "compensation",
    "event_type_of",
    "verify",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sagacity' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
