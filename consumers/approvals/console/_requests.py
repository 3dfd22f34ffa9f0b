"""The inbox of open requests, one request's page, and deciding it.

The request page shows the exact stored payload (its bytes, its whitespace, its hash) and the
request entry's hash; the decision form sends that hash back (``request_hash``), so an approval
names the request the person saw (docs/adr/0014).  Decisions go through the approvals
service's own decision path (:class:`ApprovalService`), as the API's do.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router

from sagacity.chain import payload_sha256
from sagacity.consumers.approvals.console import _undo
from sagacity.consumers.approvals.console._page import (
    MAX_FIELD,
    Console,
    Viewer,
    log,
    page,
    parse_seq,
    span,
)
from sagacity.errors import (
    ApprovalError,
    ApprovalNotFound,
    InvalidArgumentError,
    PermissionDeniedError,
)
from sagacity.gate._approval import load_chain
from sagacity.ports import OPEN_STATES
from sagacity.privacy._redaction import masked, redacted_fields

_VISIBLE = {0x20: "·", 0x09: "→", 0x0A: "↵\n", 0x0D: "␍", 0xA0: "⍽"}


def _pretty(text: str | None) -> str | None:
    """``text`` formatted, when it is JSON, with each redacted field shown as ``•••• (redacted)``
    (docs/adr/0019-erasure.md §5)."""
    if text is None:
        return None
    try:
        return json.dumps(masked(json.loads(text)), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return None


def _redacted(text: str | None) -> list[str]:
    """The paths of the fields redacted in ``text`` (empty when none, or not JSON)."""
    if text is None:
        return []
    try:
        return redacted_fields(json.loads(text))
    except ValueError:
        return []


def _visible_whitespace(text: str) -> str | None:
    """``text`` with whitespace and invisible characters drawn, or ``None`` when it has none.

    A payload that differs from what it looks like by a space, a tab, a non-breaking space or
    a zero-width character is exactly what an approver must be able to see.
    """
    out = []
    changed = False
    for char in text:
        code = ord(char)
        if code in _VISIBLE:
            out.append(_VISIBLE[code])
            changed = True
        elif char.isprintable() and not unicodedata.category(char).startswith("Z"):
            out.append(char)
        else:
            out.append(f"⟨U+{code:04X}⟩")
            changed = True
    return "".join(out) if changed else None


def _inbox_items(console: Console, viewer: Viewer) -> list[dict[str, Any]]:
    rows = console.service.requests(viewer.principal, states=OPEN_STATES)
    now = console.now_us()
    out = []
    for row in rows:
        deadline = console.deadline_of(row)
        out.append(
            {
                "row": row,
                "writer": console.writer_of(row),
                "age": span((now - row.requested_at_us) / 1e6),
                "left": span((deadline - now) / 1e6) if deadline else "no limit",
            }
        )
    return out


async def inbox(request: Request, console: Console, viewer: Viewer) -> Response:
    """The open requests the viewer may decide."""
    items = await run_in_threadpool(_inbox_items, console, viewer)
    return console.render(request, "inbox.html", viewer, items=items, refresh_s=console.refresh_s)


def _request_context(console: Console, viewer: Viewer, saga_id: str, seq: int) -> dict[str, Any]:
    row = console.service.get(viewer.principal, saga_id, seq)
    entries = load_chain(console.sagacity.journal, saga_id)
    before = [e for e in entries if e.seq < seq]
    after = [e for e in entries if e.seq > seq]
    deadline = console.deadline_of(row, entries)
    stored_hash = row.payload_sha256
    return {
        "row": row,
        "before": before,
        "after": after,
        "pretty": _pretty(row.payload),
        "redacted": _redacted(row.payload),
        "visible": _visible_whitespace(row.payload),
        "payload_bytes": len(row.payload.encode("utf-8")),
        "computed_sha256": payload_sha256(row.payload),
        "hash_matches": stored_hash == payload_sha256(row.payload),
        "deadline": deadline,
        "left": span((deadline - console.now_us()) / 1e6) if deadline else "no limit",
        "writer": console.writer_of(row),
        "signed_by_me": viewer.principal.name in row.signed_by,
        # A routed request is offered for decision only to those it is routed to (routing.md).
        "routed_away": console.service.routed_refusal(viewer.principal, row),
        "undo": _undo.undo_list(before, console.sagacity.registry),  # what an undo puts back
    }


async def request_page(request: Request, console: Console, viewer: Viewer) -> Response:
    """One request: its payload as stored, its saga so far, and the decision form."""
    saga_id = request.path_params["saga_id"]
    seq = parse_seq(request.path_params["seq"])
    context = await run_in_threadpool(_request_context, console, viewer, saga_id, seq)
    done = request.query_params.get("done")
    message = {
        "approved": "Your approval is recorded on the chain.",
        "rejected": "Your rejection is recorded; the saga is handed to compensation.",
    }.get(done or "")
    return console.render(request, "request.html", viewer, message=message, **context)


def _act(
    console: Console,
    viewer: Viewer,
    saga_id: str,
    seq: int,
    *,
    decision: object,
    request_hash: str | None,
    reason: str | None,
) -> None:
    if decision == "approve":
        if request_hash is None:
            raise InvalidArgumentError("the form names no request hash: reload the page")
        console.service.approve(viewer.principal, saga_id, seq, request_hash=request_hash)
    elif decision == "reject":
        console.service.reject(viewer.principal, saga_id, seq, reason=reason)
    else:
        raise InvalidArgumentError("choose approve or reject")


async def decide(request: Request, console: Console, viewer: Viewer) -> Response:
    """Approve (bound to the request hash the page showed) or reject, as the viewer."""
    saga_id = request.path_params["saga_id"]
    seq = parse_seq(request.path_params["seq"])
    form = await request.form(max_fields=20, max_files=0)
    decision = form.get("decision")
    shown = form.get("request_hash")
    request_hash = shown if isinstance(shown, str) and shown else None
    reason = form.get("reason")
    reason_text = reason.strip() if isinstance(reason, str) and reason.strip() else None
    if reason_text is not None and len(reason_text) > MAX_FIELD:
        raise InvalidArgumentError(f"the reason is longer than {MAX_FIELD} characters")
    try:
        await run_in_threadpool(
            lambda: _act(
                console,
                viewer,
                saga_id,
                seq,
                decision=decision,
                request_hash=request_hash,
                reason=reason_text,
            )
        )
    except (ApprovalError, InvalidArgumentError) as exc:
        if isinstance(exc, PermissionDeniedError | ApprovalNotFound):
            raise
        context = await run_in_threadpool(_request_context, console, viewer, saga_id, seq)
        return console.render(
            request,
            "request.html",
            viewer,
            409 if isinstance(exc, ApprovalError) else 422,
            refusal=str(exc),
            message=None,
            **context,
        )
    log.info("console: %s %s %s/%s", viewer.principal.name, decision, saga_id, seq)
    done = "approved" if decision == "approve" else "rejected"
    return RedirectResponse(
        f"/ui/requests/{quote(saga_id, safe='')}/{seq}?done={done}", status_code=303
    )


router = Router(
    routes=[
        Route("/", page(inbox), methods=["GET"]),
        Route("/requests/{saga_id}/{seq}", page(request_page), methods=["GET"]),
        Route("/requests/{saga_id}/{seq}", page(decide, post=True), methods=["POST"]),
    ]
)
