"""Signing in and out: a bearer token exchanged for a session cookie, rate-limited by address.

The sign-in form carries its own form token (a cookie scoped to ``/ui/login``), since no
session exists yet; signing out is a page form like any other (:func:`~._page.page`).
"""

from __future__ import annotations

import secrets

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router

from sagacity.consumers.approvals._auth import Principal, token_sha256
from sagacity.consumers.approvals._statuses import status_for
from sagacity.consumers.approvals.console._page import (
    Console,
    Viewer,
    console_of,
    log,
    page,
    safe_next,
)
from sagacity.consumers.approvals.console._security import same_origin, tokens_match
from sagacity.consumers.approvals.console._sessions import COOKIE, Session
from sagacity.errors import PermissionDeniedError, SagacityError

LOGIN_CSRF_COOKIE = "sagacity_login_csrf"


def _client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def login_form(request: Request) -> Response:
    """The sign-in form, with a fresh form token in its cookie."""
    token = secrets.token_urlsafe(24)
    response = console_of(request).render(
        request,
        "login.html",
        None,
        login_csrf=token,
        next=safe_next(request.query_params.get("next")),
        message=None,
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui/login",
    )
    return response


def _signed_in(console: Console, token: object) -> tuple[Principal | None, str, Session | None]:
    """The principal holding ``token`` and its new session (``None``: no such principal).

    Raises:
        PermissionDeniedError: an agent's token (agents never use the console).
    """
    if not isinstance(token, str) or not token or len(token) > 512:
        return None, "", None
    principal = console.auth.authenticate(token)
    if principal is None:
        return None, "", None
    principal.check_person()  # an agent's token: refused with its reason
    session_id, session = console.sessions.create(
        token_sha256=token_sha256(token), principal=principal.name, now_us=console.now_us()
    )
    return principal, session_id, session


async def login(request: Request) -> Response:
    """Exchange a token for a session, or say why not."""
    console = console_of(request)
    client = _client_of(request)
    if not same_origin(request):
        return console.error_page(request, None, 403, "Refused", "cross-site request refused")
    wait = console.limiter.blocked(client)
    if wait is not None:
        log.warning("console: sign-in rate limit reached for %s", client)
        return console.error_page(
            request,
            None,
            429,
            "Too many attempts",
            f"too many failed sign-ins; try again in {wait:.0f} s",
        )
    form = await request.form(max_fields=5, max_files=0)
    if not tokens_match(request.cookies.get(LOGIN_CSRF_COOKIE), form.get("csrf")):
        return console.error_page(request, None, 403, "Refused", "missing or stale form token")
    next_page = safe_next(form.get("next"))
    try:
        principal, session_id, session = await run_in_threadpool(
            _signed_in, console, form.get("token")
        )
    except PermissionDeniedError as exc:
        log.info("console: an agent's token was refused sign-in from %s", client)
        return console.error_page(request, None, 403, "Not allowed", str(exc))
    except SagacityError as exc:
        return console.error_page(request, None, status_for(exc), "Unavailable", str(exc))
    if principal is None or session is None:
        console.limiter.failed(client)
        log.info("console: failed sign-in from %s", client)
        return console.render(
            request,
            "login.html",
            None,
            401,
            login_csrf=request.cookies.get(LOGIN_CSRF_COOKIE),
            next=next_page,
            message="unknown token",
        )
    console.limiter.succeeded(client)
    log.info("console: %s signed in from %s", principal.name, client)
    return _session_cookie(
        request, console, RedirectResponse(next_page, status_code=303), session_id
    )


def _session_cookie(
    request: Request, console: Console, response: Response, session_id: str
) -> Response:
    """``response`` setting the session cookie and dropping the sign-in form's token."""
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(console.sessions.ttl_s),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/ui/login")
    return response


async def logout(request: Request, console: Console, viewer: Viewer) -> Response:
    """End the viewer's session."""
    await run_in_threadpool(console.sessions.delete, viewer.session_id)
    log.info("console: %s signed out", viewer.principal.name)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


router = Router(
    routes=[
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", page(logout, post=True), methods=["POST"]),
    ]
)
