"""A saga's timeline, and the attention queue: sagas in doubt, and settling a suspect step.

A saga is shown to a principal that may read one of its tools (:func:`check_readable`); its
chain is verified on the page, and the archive's verdict shown beside it where an archive is
configured.  Settling goes through the approvals service's own path, as the API's does.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router

from sagacity.chain import verify
from sagacity.consumers.approvals._reads import check_readable, may_read
from sagacity.consumers.approvals.console._page import (
    MAX_FIELD,
    SEVEN_DAYS_US,
    Console,
    Viewer,
    log,
    page,
    parse_seq,
)
from sagacity.entries import _attributes as attr
from sagacity.errors import InvalidArgumentError, SagacityError
from sagacity.gate._settlement import SettlementOutcome, open_suspects
from sagacity.saga._outcome import outcome_from_chain


def _attention_context(console: Console, viewer: Viewer) -> dict[str, Any]:
    service = console.service
    sagas = []
    for row in service.store.attention():
        try:
            entries = console.sagacity.entries(row.saga_id)
        except SagacityError:
            entries = []
        if not may_read(viewer.principal, entries):
            continue
        outcome = outcome_from_chain(entries) if entries else None
        suspects = open_suspects(entries)
        sagas.append(
            {
                "row": row,
                "dirty": outcome.dirty if outcome else (),
                "suspects": suspects,
            }
        )
    since = console.now_us() - SEVEN_DAYS_US
    readable = viewer.principal.may_read
    expired = [r for r in service.store.closed(("expired",), since_us=since) if readable([r.tool])]
    refused = [r for r in service.store.closed(("refused",), since_us=since) if readable([r.tool])]
    return {
        "sagas": sagas,
        "expired": expired,
        "refused": refused,
        "outcomes": [o.value for o in SettlementOutcome],
    }


async def attention(request: Request, console: Console, viewer: Viewer) -> Response:
    """Sagas in doubt the viewer may read, and the requests expired or refused this week."""
    context = await run_in_threadpool(_attention_context, console, viewer)
    done = request.query_params.get("done")
    message = "The settlement is recorded; compensation follows." if done else None
    return console.render(request, "attention.html", viewer, message=message, **context)


async def settle(request: Request, console: Console, viewer: Viewer) -> Response:
    """Settle a suspect step with what the viewer found out."""
    saga_id = request.path_params["saga_id"]
    seq = parse_seq(request.path_params["seq"])
    form = await request.form(max_fields=20, max_files=0)
    outcome = form.get("outcome")
    note = form.get("note")
    if not isinstance(note, str) or not note.strip():
        raise InvalidArgumentError("write a note: what you found out")
    if len(note) > MAX_FIELD:
        raise InvalidArgumentError(f"the note is longer than {MAX_FIELD} characters")
    if not isinstance(outcome, str):
        raise InvalidArgumentError("choose an outcome")
    await run_in_threadpool(
        lambda: console.service.settle(viewer.principal, saga_id, seq, outcome=outcome, note=note)
    )
    log.info("console: %s settled %s/%s %s", viewer.principal.name, saga_id, seq, outcome)
    return RedirectResponse("/ui/attention?done=settled", status_code=303)


def _saga_context(console: Console, viewer: Viewer, saga_id: str) -> dict[str, Any]:
    entries = console.sagacity.entries(saga_id)
    check_readable(viewer.principal, saga_id, entries)
    verdict = verify(entries, saga_id=saga_id)
    outcome = outcome_from_chain(entries)
    timeline = []
    for entry in entries:
        body = entry.payload if entry.payload is not None else entry.result
        timeline.append(
            {
                "entry": entry,
                "body": body,
                "error": entry.error,
                "ref": entry.attributes.get(attr.REF_SEQ),
                "note": entry.attributes.get(attr.NOTE),
                "outcome": entry.attributes.get(attr.OUTCOME),
            }
        )
    archive = console.archive
    archived = archive.verdict(saga_id) if archive is not None else None
    return {
        "saga_id": saga_id,
        "timeline": timeline,
        "verdict": verdict,
        "saga_status": outcome.status.value if outcome else "RUNNING",
        "suspects": open_suspects(entries),
        "outcomes": [o.value for o in SettlementOutcome],
        "archive_configured": archive is not None,
        "archived": archived,
    }


async def saga_page(request: Request, console: Console, viewer: Viewer) -> Response:
    """A saga's timeline, its chain's verdict and (where configured) the archive's."""
    saga_id = request.path_params["saga_id"]
    context = await run_in_threadpool(_saga_context, console, viewer, saga_id)
    return console.render(request, "saga.html", viewer, **context)


router = Router(
    routes=[
        Route("/attention", page(attention), methods=["GET"]),
        Route("/sagas/{saga_id}", page(saga_page), methods=["GET"]),
        Route("/sagas/{saga_id}/settle/{seq}", page(settle, post=True), methods=["POST"]),
    ]
)
