"""A saga's standing grants in the console: listed, made, revoked (docs/operations/grants.md).

``GET /ui/sagas/{saga_id}/grants`` lists the saga's grants with their standing now (active,
revoked, expired, not counted and why) and, for the tools the viewer may decide, a form to
grant one and a Revoke button per active grant.  Both forms go through the approvals service's
own grant path (:mod:`sagacity.consumers.approvals._grants`), as the API's routes do, so the
console records exactly what the API would, as the signed-in principal; the grant and the
revocation are signed with the service's approvals key.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router

from sagacity.consumers.approvals import _grants
from sagacity.consumers.approvals.console._page import Console, Viewer, page
from sagacity.errors import InvalidArgumentError
from sagacity.gate._grant_rules import MAX_RULES
from sagacity.tools._reversibility import Reversibility

log = logging.getLogger("sagacity.console")
_DONE = {"granted": "The grant is recorded, signed.", "revoked": "The grant is revoked."}


def _grantable(console: Console, viewer: Viewer) -> list[str]:
    """The tools the service declares grantable that the viewer may decide."""
    names = []
    for name in console.sagacity.registry.names():
        tool = console.sagacity.registry.get(name)
        if tool is None:
            continue
        definition = tool.definition
        if (
            definition.reversibility is Reversibility.IRREVERSIBLE
            and definition.grantable
            and viewer.principal.may_decide(name)
        ):
            names.append(name)
    return sorted(names)


async def grants_page(request: Request, console: Console, viewer: Viewer) -> Response:
    """``GET /ui/sagas/{saga_id}/grants``: the saga's grants and the forms."""
    saga_id = request.path_params["saga_id"]

    def read() -> dict[str, Any]:
        views = _grants.grants(console.service, viewer.principal, saga_id)
        return {
            "grants": [v.to_dict() for v in views],
            "tools": _grantable(console, viewer),
            "may_revoke": {
                v.grant.grant_id: viewer.principal.may_decide(v.grant.tool) for v in views
            },
        }

    context = await run_in_threadpool(read)
    done = _DONE.get(request.query_params.get("done") or "")
    return console.render(request, "grants.html", viewer, saga_id=saga_id, message=done, **context)


def _rules_of(text: object) -> list[str]:
    if not isinstance(text, str):
        raise InvalidArgumentError("write the argument rules, one a line")
    rules = [line.strip() for line in text.splitlines() if line.strip()]
    if not rules or len(rules) > MAX_RULES:
        raise InvalidArgumentError(f"write 1 to {MAX_RULES} argument rules, one a line")
    return rules


def _minutes_of(text: object) -> int:
    try:
        minutes = int(str(text))
    except ValueError as exc:
        raise InvalidArgumentError("the grant's duration is a whole number of minutes") from exc
    return minutes * 60


async def grant(request: Request, console: Console, viewer: Viewer) -> Response:
    """``POST /ui/sagas/{saga_id}/grants``: grant a tool for the saga."""
    saga_id = request.path_params["saga_id"]
    form = await request.form(max_fields=20, max_files=0)
    tool, rules, ttl_s = (
        form.get("tool"),
        _rules_of(form.get("rules")),
        _minutes_of(form.get("minutes")),
    )
    if not isinstance(tool, str) or not tool:
        raise InvalidArgumentError("choose the tool to grant")
    await run_in_threadpool(
        lambda: _grants.grant(console.service, viewer.principal, saga_id, tool, rules, ttl_s=ttl_s)
    )
    log.info("console: %s granted %s in %s", viewer.principal.name, tool, saga_id)
    return RedirectResponse(f"/ui/sagas/{quote(saga_id, safe='')}/grants?done=granted", 303)


async def revoke(request: Request, console: Console, viewer: Viewer) -> Response:
    """``POST /ui/sagas/{saga_id}/grants/{grant_id}/revoke``: revoke one grant."""
    saga_id, grant_id = request.path_params["saga_id"], request.path_params["grant_id"]
    await run_in_threadpool(
        lambda: _grants.revoke(console.service, viewer.principal, saga_id, grant_id)
    )
    log.info("console: %s revoked grant %s of %s", viewer.principal.name, grant_id, saga_id)
    return RedirectResponse(f"/ui/sagas/{quote(saga_id, safe='')}/grants?done=revoked", 303)


router = Router(
    routes=[
        Route("/sagas/{saga_id}/grants", page(grants_page), methods=["GET"]),
        Route("/sagas/{saga_id}/grants", page(grant, post=True), methods=["POST"]),
        Route(
            "/sagas/{saga_id}/grants/{grant_id}/revoke",
            page(revoke, post=True),
            methods=["POST"],
        ),
    ]
)
