"""The journal port (kept importable here; the ports live in :mod:`sagacity.ports`)."""

from __future__ import annotations

from sagacity.ports import ApprovalRequest, ConditionalJournal, Journal

__all__ = ["ApprovalRequest", "ConditionalJournal", "Journal"]
