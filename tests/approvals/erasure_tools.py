"""Tools of the erasure tests (``--tools tests.approvals.erasure_tools:Desk``): the approvals
tests' bank, and a probe that answers with what the serving process's own journal holds of a
saga's data — the MCP server serves no read of the journal, so its answers are observed
through this tool, which reads as any of its calls does (docs/operations/erasure.md)."""

from __future__ import annotations

import json

from sagacity import Reversibility, compensable
from sagacity.saga._scope import current_scope
from tests.approvals.tools import Bank


class Desk(Bank):
    """Bank's tools and the probe."""

    @compensable(reversibility=Reversibility.READ)
    def saga_data(self, saga_id: str) -> str:
        """The data values of ``saga_id`` this server's journal holds (payloads, results,
        errors), as JSON."""
        scope = current_scope()
        assert scope is not None, "called outside a saga"
        journal = scope.owner.journal  # type: ignore[attr-defined]
        values = [
            value
            for entry in journal.entries(saga_id)
            for value in (entry.payload, entry.result, entry.error)
            if value is not None
        ]
        return json.dumps(values)
