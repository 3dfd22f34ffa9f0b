"""The console's application: its pages' routers, its templates and its state.

Every page is rendered on the server (Jinja2 through Starlette's templating, autoescaped) and
every action is a plain form POST checked by :mod:`._security` (through :func:`~._page.page`).
The pages, by concern: signing in (:mod:`._signin`), the inbox, a request and deciding it
(:mod:`._requests`), sagas and the attention queue (:mod:`._sagas`), the archive's audit
bundle (:mod:`._bundles`), gate metrics (:mod:`._metrics_page`) and a saga's standing grants
(:mod:`._grants`).  The decisions go through
the approvals service's own decision path (:class:`ApprovalService`), as the API's do, so the
console records exactly what the API would, as the signed-in principal.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals.console import (
    _bundles,
    _grants,
    _metrics_page,
    _requests,
    _sagas,
    _signin,
    _undo,
)
from sagacity.consumers.approvals.console._page import (
    Console,
    PrincipalSource,
    SagaArchive,
    console_of,
    span,
    when,
)
from sagacity.consumers.approvals.console._security import LoginLimiter, SecurityHeaders
from sagacity.consumers.approvals.console._sessions import SessionStore

HERE = Path(__file__).parent


async def _not_found(request: Request, exc: Exception) -> Response:
    return console_of(request).error_page(request, None, 404, "Not found", "no such page")


async def _favicon(request: Request) -> Response:
    return PlainTextResponse("", status_code=404)


def _routes() -> list[BaseRoute]:
    # No two routers share a path, so their order does not decide which page answers.
    return [
        *_signin.router.routes,
        *_requests.router.routes,
        *_sagas.router.routes,
        *_bundles.router.routes,
        *_metrics_page.router.routes,
        *_undo.router.routes,
        *_grants.router.routes,
        Route("/favicon.ico", _favicon),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


def create_console(
    service: ApprovalService,
    *,
    auth: PrincipalSource,
    sessions: SessionStore,
    limiter: LoginLimiter | None = None,
    archive: SagaArchive | None = None,
    refresh_s: int = 5,
) -> Starlette:
    """The console as an ASGI application, to be mounted at ``/ui``.

    Args:
        service: the approvals service's decisions and reads.
        auth: the principals (the service's auth file).
        sessions: where sign-in sessions are kept.
        limiter: the sign-in rate limit (default 5 failures per address in 5 minutes).
        archive: the archive's verdict and bundle for the saga page (``None``: not shown).
        refresh_s: how often the inbox reloads itself (new requests appear within it).
    """
    # Everything a template prints is escaped (payloads and results are hostile input).
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
    )
    templates = Jinja2Templates(env=environment)
    templates.env.globals.update(when=when, span=span)
    app = Starlette(routes=_routes(), exception_handlers={404: _not_found})
    app.state.console = Console(
        service=service,
        auth=auth,
        sessions=sessions,
        limiter=limiter or LoginLimiter(),
        archive=archive,
        templates=templates,
        refresh_s=refresh_s,
    )
    app.add_middleware(SecurityHeaders)
    return app
