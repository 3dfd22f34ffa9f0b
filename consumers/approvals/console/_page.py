"""What every console page shares: the console's state, the signed-in viewer and the page rule.

The state is one :class:`Console`, made by :func:`~._routes.create_console` and kept on the
console application (``app.state.console``); every page handler gets it as an argument, from
:func:`page`, which also checks the form rules of :mod:`._security` before any handler runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from sagacity.consumers.approvals._auth import Principal, Role
from sagacity.consumers.approvals._deadline import row_deadline_us
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals._statuses import status_for
from sagacity.consumers.approvals.console._security import LoginLimiter, same_origin, tokens_match
from sagacity.consumers.approvals.console._sessions import COOKIE, Session, SessionStore
from sagacity.entries._events import JournalEntry
from sagacity.errors import (
    ApprovalNotFound,
    SagacityError,
)
from sagacity.ports import RequestRow
from sagacity.saga._saga import Sagacity

log = logging.getLogger("sagacity.console")

MAX_FIELD = 4096
SEVEN_DAYS_US = 7 * 86_400 * 1_000_000


def when(micros: int | None) -> str:
    """A time of the chain as a date (a template global)."""
    if micros is None:
        return "-"
    try:
        return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        # A time a writer chose beyond the calendar: shown as it is, never a failed page.
        return f"{micros} us"


def span(seconds: float | None) -> str:
    """A duration in the unit that reads best (a template global)."""
    if seconds is None:
        return "-"
    negative = seconds < 0
    seconds = abs(seconds)
    if seconds < 90:
        text = f"{seconds:.0f} s"
    elif seconds < 5400:
        text = f"{seconds / 60:.0f} min"
    elif seconds < 172_800:
        text = f"{seconds / 3600:.1f} h"
    else:
        text = f"{seconds / 86400:.1f} d"
    return f"-{text}" if negative else text


class PrincipalSource(Protocol):
    """What the console asks of the principals file."""

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token``."""
        ...

    def by_digest(self, digest: str) -> Principal | None:
        """The principal whose token hashes to ``digest``."""
        ...


class SagaArchive(Protocol):
    """The archive's view of a saga, where one is configured."""

    def verdict(self, saga_id: str) -> tuple[bool, str] | None:
        """``(ok, detail)`` of the archive's audit of the saga, ``None`` when it holds none."""
        ...

    def bundle(self, saga_id: str) -> bytes:
        """The saga's audit bundle as a zip archive."""
        ...


@dataclass(frozen=True, kw_only=True)
class Viewer:
    """The signed-in person a page is for, re-checked against the principals file."""

    principal: Principal
    session: Session
    session_id: str


@dataclass(frozen=True, kw_only=True)
class Console:
    """The console's state, handed to every page.

    Args:
        service: the approvals service's decisions and reads.
        auth: the principals (the service's auth file).
        sessions: where sign-in sessions are kept.
        limiter: the sign-in rate limit.
        archive: the archive's verdict and bundle for the saga page (``None``: not shown).
        templates: the pages' templates (autoescaped).
        refresh_s: how often the inbox reloads itself.
    """

    service: ApprovalService
    auth: PrincipalSource
    sessions: SessionStore
    limiter: LoginLimiter
    archive: SagaArchive | None
    templates: Jinja2Templates
    refresh_s: int
    writers: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)
    """Who asked, by request: the actor of the request's own entry, which never changes once
    journaled, so each is read from the chain once (the inbox reloads every few seconds)."""

    @property
    def sagacity(self) -> Sagacity:
        """The service's saga client (its journal and its clock)."""
        return self.service.sagacity

    def now_us(self) -> int:
        """The service's clock."""
        return self.sagacity.now_us()

    def render(
        self, request: Request, name: str, viewer: Viewer | None, status: int = 200, **context: Any
    ) -> Response:
        """The template ``name`` for ``viewer`` (and its form token), with ``context``."""
        context.update(
            viewer=viewer.principal if viewer else None,
            csrf=viewer.session.csrf if viewer else None,
            session_expires=viewer.session.expires_at_us if viewer else None,
        )
        response: Response = self.templates.TemplateResponse(
            request, name, context, status_code=status
        )
        return response

    def error_page(
        self, request: Request, viewer: Viewer | None, status: int, title: str, detail: str
    ) -> Response:
        """The error page, with ``status``."""
        return self.render(request, "error.html", viewer, status, title=title, detail=detail)

    def deadline_of(
        self, row: RequestRow, entries: Sequence[JournalEntry] | None = None
    ) -> int | None:
        """The request's approval deadline, by the service's own declarations and clock, with
        the operator extensions that verify: on the saga's ``entries`` when given, else those
        the store's fold counted."""
        if entries is None:
            return row_deadline_us(self.sagacity, row)
        return self.sagacity.approval_deadline_us(
            row.request(), seen_at_us=row.seen_at_us, entries=entries
        )

    def writer_of(self, row: RequestRow) -> str:
        """The actor of the request's entry on the chain (``?`` when it cannot be read)."""
        key = (row.saga_id, row.seq)
        if key in self.writers:
            return self.writers[key]
        try:
            entries = self.sagacity.entries(row.saga_id)
        except SagacityError:
            return "?"
        actor = next((e.actor for e in entries if e.seq == row.seq), None) or "?"
        if len(self.writers) > 10_000:
            self.writers.clear()
        self.writers[key] = actor
        return actor


Handler = Callable[[Request, Console, Viewer], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


class _Redirect(Exception):  # noqa: N818 - a flow signal inside the console
    def __init__(self, response: Response) -> None:
        super().__init__("redirect")
        self.response = response


def console_of(request: Request) -> Console:
    """The console serving ``request`` (set by :func:`~._routes.create_console`)."""
    console = request.app.state.console
    assert isinstance(console, Console)
    return console


def safe_next(value: object) -> str:
    """Only a console path (no scheme, no host, no ``//``) is followed after sign-in."""
    if (
        isinstance(value, str)
        and value.startswith("/ui/")
        and "//" not in value
        and "\\" not in value
        and all(31 < ord(c) < 127 for c in value)
    ):
        return value
    return "/ui/"


def parse_seq(raw: str) -> int:
    """A request's seq from the path (anything else is a request not found)."""
    try:
        value = int(raw)
    except ValueError:
        raise ApprovalNotFound(f"no request at seq {raw!r}") from None
    if value < 1 or value > 2**31 - 1:
        raise ApprovalNotFound(f"no request at seq {raw!r}")
    return value


def _to_login(request: Request) -> Response:
    # After signing in again the person lands where they were; a form they had sent is
    # not replayed (they see the page and decide again, with nothing half-done).
    target = request.url.path
    if request.method != "GET":
        if "/settle/" in target:
            target = "/ui/attention"
        elif not target.startswith("/ui/requests/"):
            target = "/ui/"
    return RedirectResponse(f"/ui/login?next={quote(safe_next(target))}", status_code=303)


def _viewer_of(console: Console, request: Request) -> Viewer:
    """The signed-in viewer (re-checked against the auth file), or a redirect to sign in."""
    session_id = request.cookies.get(COOKIE)
    if not session_id or len(session_id) > 128:
        raise _Redirect(_to_login(request))
    session = console.sessions.get(session_id, now_us=console.now_us())
    if session is None:
        raise _Redirect(_to_login(request))
    principal = console.auth.by_digest(session.token_sha256)
    if principal is None or principal.role is Role.AGENT:
        # Revoked, or made an agent since signing in: agents never use the console.
        console.sessions.delete(session_id)
        raise _Redirect(_to_login(request))
    return Viewer(principal=principal, session=session, session_id=session_id)


def page(handler: Handler, *, post: bool = False) -> Endpoint:
    """``handler`` as a page for a signed-in person: a form (``post``) only from the console's
    own origin with the session's form token, and a refusal as the error page of its status."""

    async def endpoint(request: Request) -> Response:
        console = console_of(request)
        viewer: Viewer | None = None
        try:
            if post and not same_origin(request):
                return console.error_page(
                    request, None, 403, "Refused", "cross-site request refused"
                )
            viewer = await run_in_threadpool(_viewer_of, console, request)
            if post:
                form = await request.form(max_fields=20, max_files=0)
                if not tokens_match(viewer.session.csrf, form.get("csrf")):
                    return console.error_page(
                        request, viewer, 403, "Refused", "missing or stale form token"
                    )
            return await handler(request, console, viewer)
        except _Redirect as redirect:
            return redirect.response
        except SagacityError as exc:
            status = status_for(exc)
            title = {
                403: "Not allowed",
                404: "Not found",
                500: "Failed",
                503: "Unavailable",
            }.get(status, "Refused")
            if status >= 500:
                log.warning("console: %s: %s", request.url.path, str(exc))
            return console.error_page(request, viewer, status, title, str(exc))

    return endpoint
