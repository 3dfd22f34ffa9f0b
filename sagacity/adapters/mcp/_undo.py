"""``undo_saga``: the MCP tool with which an agent asks for its saga to be undone.

Scoped like every served tool (an agent principal lists it among its tools, docs/mcp.md), and
to the saga's opener: the principal its first call came from, as the chain's ``caller`` says
(the rule a resume follows, docs/adr/0020-mcp-saga-scope.md).  What it does depends on where
the saga stands (docs/adr/0026-effects-and-refusals.md):

* **open in this server** (a session's saga, or one the client named): its run is cancelled,
  its completed steps compensated once (by the compensation service, delegated) — a kill
  switch in the agent's hands;
* **ended**: undoing finished work needs an operator's signature (docs/adr/0027), which no
  agent holds: nothing is journaled, and the answer lists what an undo would reverse and what
  not, with the command an operator runs (``sagacity saga undo``);
* **live elsewhere**: another writer holds it; refused.

Either way the answer says, step by step, what an undo reverses and what it cannot.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.signing._writer_roles import SagaWriters
from sagacity.undo._undo_preview import UndoPreview, preview_undo

if TYPE_CHECKING:
    from sagacity.adapters.mcp._server import SagacityMCP

UNDO_TOOL = "undo_saga"
"""The tool's name: list it among an agent's tools to let it undo its own sagas."""
UNDO_DESCRIPTION = (
    "Undo one of your sagas: a saga open here is stopped and its completed steps undone once; "
    "an ended saga needs an operator's signature, and the answer says what they run. The "
    "answer lists which steps an undo reverses and which it cannot."
)
_CALLS = (EventType.INTENT, EventType.AWAITING_APPROVAL, EventType.CONSTRAINT_VIOLATED)


def opener_of(entries: Sequence[JournalEntry]) -> str | None:
    """The principal the saga's first call came from (``None``: none was journaled)."""
    first = next((e for e in entries if e.event_type in _CALLS), None)
    caller = first.attributes.get(attr.CALLER) if first is not None else None
    return caller or None


async def undo_saga(
    server: SagacityMCP, saga_id: str, reason: str, principal: str | None
) -> CallToolResult:
    """Undo ``saga_id`` for ``principal`` (see the module documentation).

    Raises:
        MCPError: ``SAGA_REFUSED``: an unknown saga, another principal's, or one another
            writer holds.
    """
    from sagacity.adapters.mcp._server import SAGA_REFUSED

    sagacity = server.sagacity
    entries = await asyncio.to_thread(sagacity.journal.entries, saga_id)
    if not entries:
        raise MCPError(SAGA_REFUSED, f"saga {saga_id!r} is unknown")
    if opener_of(entries) != principal:
        raise MCPError(
            SAGA_REFUSED,
            f"saga {saga_id!r} was opened by another principal: only its opener undoes it "
            "here (an approver of its tools asks an operator: sagacity saga undo)",
        )
    why = reason.strip() or "asked by its agent"
    cancelled = await server.sessions.cancel(
        saga_id, f"undo_saga by {principal or 'the host'}: {why}"
    )
    if cancelled is not None:
        after = await asyncio.to_thread(sagacity.journal.entries, saga_id)
        preview = preview_undo(after, sagacity.registry)
        head = f"saga {saga_id} was stopped: {cancelled.summary()}"
        return _answer(saga_id, head, preview, status=cancelled.status.value)
    if SagaWriters.of(entries).live is not None:
        raise MCPError(
            SAGA_REFUSED,
            f"saga {saga_id!r} is held by another writer: it is undone there, or taken over "
            "(sagacity saga takeover)",
        )
    preview = preview_undo(entries, sagacity.registry)
    command = f"sagacity saga undo --saga {shlex.quote(saga_id)} --reason {shlex.quote(why)}"
    head = (
        f"saga {saga_id} has ended: undoing finished work needs an operator's signature; "
        f"nothing was journaled. An operator runs: {command}"
    )
    return _answer(saga_id, head, preview, status="needs_operator", command=command)


def _answer(
    saga_id: str, head: str, preview: UndoPreview, *, status: str, command: str | None = None
) -> CallToolResult:
    lines = [head, *(step.line() for step in preview.steps)]
    warning = preview.warning()
    if warning is not None:
        lines.append(f"Warning: {warning}")
    structured: dict[str, Any] = {
        "saga_id": saga_id,
        "status": status,
        "reversed": [_step(s) for s in preview.reversible],
        "kept": [_step(s) for s in preview.kept],
        "undone": list(preview.undone),
    }
    if command is not None:
        structured["command"] = command
    return CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": "\n".join(lines)}],
            "structuredContent": structured,
        }
    )


def _step(step: Any) -> dict[str, Any]:
    return {"seq": step.seq, "tool": step.tool, "how": step.how}
