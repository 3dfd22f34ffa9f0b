""" "Undo this saga" in the console, and what an undo could reverse, shown before approving.

The undo of an ended saga is the operator-signed ``COMPENSATION_REQUESTED`` of
docs/adr/0027-operator-signatures.md.  The console holds no operator key (keep it with the
operators, off the services' hosts): its undo page prepares the request — the list of what an
undo reverses and what it cannot, read by the compensation runner's own plan from this
service's declarations of the tools (``--tools``) — and shows the exact command an operator
runs with the key, ``sagacity saga undo`` (docs/adr/0026-effects-and-refusals.md).  The same
list is shown on a request's page, so an approver knows, before approving, which of the
saga's earlier steps a rejection (or a later undo) could put back and which not.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

from sagacity.consumers.approvals._reads import check_readable
from sagacity.consumers.approvals.console._page import Console, Viewer, page
from sagacity.entries._events import JournalEntry
from sagacity.saga._outcome import outcome_from_chain
from sagacity.signing._writer_roles import SagaWriters
from sagacity.tools._registry import ToolRegistry
from sagacity.undo._undo_preview import preview_undo


def undo_list(entries: Sequence[JournalEntry], registry: ToolRegistry) -> dict[str, Any]:
    """What an undo of the saga whose chain is ``entries`` reverses and what it cannot, by the
    service's declarations (for a template)."""
    preview = preview_undo(entries, registry)
    return {
        "reversed": preview.reversible,
        "kept": preview.kept,
        "undone": preview.undone,
        "warning": preview.warning(),
    }


def undo_context(
    saga_id: str, entries: Sequence[JournalEntry], registry: ToolRegistry
) -> dict[str, Any]:
    """The undo page of a saga: its list, its state, and the command an operator signs."""
    outcome = outcome_from_chain(entries)
    reason = shlex.quote("<why, in a line, no personal data>")
    return {
        "saga_id": saga_id,
        "saga_status": outcome.status.value if outcome is not None else "RUNNING",
        "live": SagaWriters.of(entries).live,
        "command": f"sagacity saga undo --saga {shlex.quote(saga_id)} --reason {reason}",
        **undo_list(entries, registry),
    }


async def undo_page(request: Request, console: Console, viewer: Viewer) -> Response:
    """``GET /ui/sagas/{saga_id}/undo``, read like the saga page."""

    def read(saga_id: str) -> dict[str, Any]:
        entries = console.sagacity.entries(saga_id)
        check_readable(viewer.principal, saga_id, entries)
        return undo_context(saga_id, entries, console.sagacity.registry)

    context = await run_in_threadpool(read, request.path_params["saga_id"])
    return console.render(request, "undo.html", viewer, undo=context, **context)


router = Router(routes=[Route("/sagas/{saga_id}/undo", page(undo_page), methods=["GET"])])
