"""Sagacity: compensation, human approval gates and a verifiable evidence chain for the tools
AI agents call."""

from sagacity._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.chain import BreakReason, ChainVerdict, verify
from sagacity.errors import SagacityError
from sagacity.journal import ApprovalRequest, Journal

__all__ = [
    "GENESIS_HASH",
    "ApprovalRequest",
    "BreakReason",
    "ChainVerdict",
    "EntryDraft",
    "EventType",
    "Journal",
    "JournalEntry",
    "SagacityError",
    "verify",
]
