"""Sagacity: compensation, human approval gates and a verifiable evidence chain for the tools
AI agents call."""

from sagacity._compensation import CompensationCall, CompensationReport, CompensationRunner
from sagacity._context import CompensationContext
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
from sagacity._saga import Sagacity
from sagacity._undo import Undo
from sagacity.chain import BreakReason, ChainVerdict, verify
from sagacity.errors import SagacityError
from sagacity.journal import ApprovalRequest, Journal

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
    "EntryDraft",
    "EventType",
    "InMemoryJournal",
    "Journal",
    "JournalEntry",
    "RegisteredTool",
    "Reversibility",
    "SagaResult",
    "SagaStatus",
    "Sagacity",
    "SagacityError",
    "Step",
    "ToolRegistry",
    "Undo",
    "UnknownEventType",
    "compensable",
    "compensation",
    "event_type_of",
    "verify",
]
