"""Sagacity: compensation, human approval gates and a verifiable evidence chain for the tools
AI agents call."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagacity.chain import BreakReason, ChainVerdict, verify
    from sagacity.entries._events import (
        GENESIS_HASH,
        AnyEventType,
        EntryDraft,
        EventType,
        JournalEntry,
        UnknownEventType,
        event_type_of,
    )
    from sagacity.entries._memory import InMemoryJournal
    from sagacity.errors import SagacityError
    from sagacity.journal import ApprovalRequest, Journal
    from sagacity.saga._result import SagaResult, SagaStatus, Step
    from sagacity.saga._run import SagaRun
    from sagacity.saga._saga import Sagacity
    from sagacity.signing._decision_signature import DecisionSigner, DecisionVerifier
    from sagacity.tools._decorators import compensable, compensation
    from sagacity.tools._registry import RegisteredTool, ToolRegistry
    from sagacity.tools._reversibility import Reversibility
    from sagacity.undo._compensation import CompensationCall, CompensationReport, CompensationRunner
    from sagacity.undo._context import CompensationContext
    from sagacity.undo._undo import Undo, UndoCall

# Each public name and the module defining it: imported on first use, so ``import sagacity``
# (and every ``sagacity`` command) starts without loading the whole core.
_EXPORTS = {
    "AnyEventType": "sagacity.entries._events",
    "ApprovalRequest": "sagacity.journal",
    "BreakReason": "sagacity.chain",
    "ChainVerdict": "sagacity.chain",
    "CompensationCall": "sagacity.undo._compensation",
    "CompensationContext": "sagacity.undo._context",
    "CompensationReport": "sagacity.undo._compensation",
    "CompensationRunner": "sagacity.undo._compensation",
    "DecisionSigner": "sagacity.signing._decision_signature",
    "DecisionVerifier": "sagacity.signing._decision_signature",
    "EntryDraft": "sagacity.entries._events",
    "EventType": "sagacity.entries._events",
    "GENESIS_HASH": "sagacity.entries._events",
    "InMemoryJournal": "sagacity.entries._memory",
    "Journal": "sagacity.journal",
    "JournalEntry": "sagacity.entries._events",
    "RegisteredTool": "sagacity.tools._registry",
    "Reversibility": "sagacity.tools._reversibility",
    "SagaResult": "sagacity.saga._result",
    "SagaRun": "sagacity.saga._run",
    "SagaStatus": "sagacity.saga._result",
    "Sagacity": "sagacity.saga._saga",
    "SagacityError": "sagacity.errors",
    "Step": "sagacity.saga._result",
    "ToolRegistry": "sagacity.tools._registry",
    "Undo": "sagacity.undo._undo",
    "UndoCall": "sagacity.undo._undo",
    "UnknownEventType": "sagacity.entries._events",
    "compensable": "sagacity.tools._decorators",
    "compensation": "sagacity.tools._decorators",
    "event_type_of": "sagacity.entries._events",
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
