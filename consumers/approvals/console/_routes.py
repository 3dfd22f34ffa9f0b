"""The console's pages: sign-in, inbox, request, attention queue, saga and gate metrics.

Every page is rendered on the server (Jinja2 through Starlette's templating, autoescaped) and
every action is a plain form POST checked by :mod:`._security`.  The decisions go through the
approvals service's own decision path (:class:`ApprovalService`), as the API's do, so the
console records exactly what the API would, as the signed-in principal.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sagacity import _attributes as attr
from sagacity._approval import load_chain
from sagacity._outcome import outcome_from_chain
from sagacity._redaction import masked, redacted_fields
from sagacity._settlement import SettlementOutcome, open_suspects
from sagacity.chain import payload_sha256, verify
from sagacity.consumers.approvals._auth import Principal, Role, token_sha256
from sagacity.consumers.approvals._reads import check_readable, may_read
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals.console import _metrics, _undo
from sagacity.consumers.approvals.console._security import (
    LoginLimiter,
    SecurityHeaders,
    same_origin,
    tokens_match,
)
from sagacity.consumers.approvals.console._sessions import COOKIE, Session, SessionStore
from sagacity.errors import (
    ApprovalError,
    ApprovalNotFound,
    AuthenticationError,
    ConfigurationError,
    InvalidArgumentError,
    JournalError,
    PermissionDeniedError,
    PersistenceError,
    SagacityError,
    UnknownSagaError,
)
from sagacity.ports import OPEN_STATES, RequestRow

log = logging.getLogger("sagacity.console")

HERE = Path(__file__).parent
LOGIN_CSRF_COOKIE = "sagacity_login_csrf"
MAX_FIELD = 4096
_SEVEN_DAYS_US = 7 * 86_400 * 1_000_000


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
class _Viewer:
    principal: Principal
    session: Session
    session_id: str


_Handler = Callable[[Request, _Viewer], Awaitable[Response]]


class _Redirect(Exception):  # noqa: N818 - a flow signal inside the console
    def __init__(self, response: Response) -> None:
        super().__init__("redirect")
        self.response = response


def _when(micros: int | None) -> str:
    if micros is None:
        return "-"
    try:
        return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        # A time a writer chose beyond the calendar: shown as it is, never a failed page.
        return f"{micros} us"


def _span(seconds: float | None) -> str:
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


_VISIBLE = {0x20: "·", 0x09: "→", 0x0A: "↵\n", 0x0D: "␍", 0xA0: "⍽"}


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


def _safe_next(value: object) -> str:
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


def _status_for(exc: SagacityError) -> int:
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, PermissionDeniedError):
        return 403
    if isinstance(exc, UnknownSagaError | ApprovalNotFound):
        return 404
    if isinstance(exc, InvalidArgumentError):
        return 422
    if isinstance(exc, PersistenceError | JournalError | ConfigurationError):
        return 503
    return 409


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
    templates.env.globals.update(when=_when, span=_span)
    limiter = limiter or LoginLimiter()
    sagacity = service.sagacity

    now_us = sagacity.now_us

    def render(
        request: Request,
        name: str,
        viewer: _Viewer | None,
        status: int = 200,
        **context: Any,
    ) -> Response:
        context.update(
            viewer=viewer.principal if viewer else None,
            csrf=viewer.session.csrf if viewer else None,
            session_expires=viewer.session.expires_at_us if viewer else None,
        )
        response: Response = templates.TemplateResponse(request, name, context, status_code=status)
        return response

    def error_page(
        request: Request, viewer: _Viewer | None, status: int, title: str, detail: str
    ) -> Response:
        return render(request, "error.html", viewer, status, title=title, detail=detail)

    def to_login(request: Request) -> Response:
        # After signing in again the person lands where they were; a form they had sent is
        # not replayed (they see the page and decide again, with nothing half-done).
        target = request.url.path
        if request.method != "GET":
            if "/settle/" in target:
                target = "/ui/attention"
            elif not target.startswith("/ui/requests/"):
                target = "/ui/"
        return RedirectResponse(f"/ui/login?next={quote(_safe_next(target))}", status_code=303)

    def viewer_of(request: Request) -> _Viewer:
        """The signed-in viewer (re-checked against the auth file), or a redirect to sign in."""
        session_id = request.cookies.get(COOKIE)
        if not session_id or len(session_id) > 128:
            raise _Redirect(to_login(request))
        session = sessions.get(session_id, now_us=now_us())
        if session is None:
            raise _Redirect(to_login(request))
        principal = auth.by_digest(session.token_sha256)
        if principal is None or principal.role is Role.AGENT:
            # Revoked, or made an agent since signing in: agents never use the console.
            sessions.delete(session_id)
            raise _Redirect(to_login(request))
        return _Viewer(principal=principal, session=session, session_id=session_id)

    def page(handler: _Handler, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            viewer: _Viewer | None = None
            try:
                if post and not same_origin(request):
                    return error_page(request, None, 403, "Refused", "cross-site request refused")
                viewer = await run_in_threadpool(viewer_of, request)
                if post:
                    form = await request.form(max_fields=20, max_files=0)
                    if not tokens_match(viewer.session.csrf, form.get("csrf")):
                        return error_page(
                            request, viewer, 403, "Refused", "missing or stale form token"
                        )
                return await handler(request, viewer)
            except _Redirect as redirect:
                return redirect.response
            except SagacityError as exc:
                status = _status_for(exc)
                title = {
                    403: "Not allowed",
                    404: "Not found",
                    503: "Unavailable",
                }.get(status, "Refused")
                if status == 503:
                    log.warning("console: %s: %s", request.url.path, exc.message)
                return error_page(request, viewer, status, title, exc.message)

        return endpoint

    # -- sign in / out ------------------------------------------------------------------------
    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    async def login_form(request: Request) -> Response:
        import secrets

        token = secrets.token_urlsafe(24)
        response = render(
            request,
            "login.html",
            None,
            login_csrf=token,
            next=_safe_next(request.query_params.get("next")),
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

    async def login(request: Request) -> Response:
        client = client_of(request)
        if not same_origin(request):
            return error_page(request, None, 403, "Refused", "cross-site request refused")
        wait = limiter.blocked(client)
        if wait is not None:
            log.warning("console: sign-in rate limit reached for %s", client)
            return error_page(
                request,
                None,
                429,
                "Too many attempts",
                f"too many failed sign-ins; try again in {wait:.0f} s",
            )
        form = await request.form(max_fields=5, max_files=0)
        if not tokens_match(request.cookies.get(LOGIN_CSRF_COOKIE), form.get("csrf")):
            return error_page(request, None, 403, "Refused", "missing or stale form token")
        token = form.get("token")
        next_page = _safe_next(form.get("next"))

        def check() -> tuple[Principal | None, str, Session | None]:
            if not isinstance(token, str) or not token or len(token) > 512:
                return None, "", None
            principal = auth.authenticate(token)
            if principal is None:
                return None, "", None
            principal.check_person()  # an agent's token: refused with its reason
            session_id, session = sessions.create(
                token_sha256=token_sha256(token), principal=principal.name, now_us=now_us()
            )
            return principal, session_id, session

        try:
            principal, session_id, session = await run_in_threadpool(check)
        except PermissionDeniedError as exc:
            log.info("console: an agent's token was refused sign-in from %s", client)
            return error_page(request, None, 403, "Not allowed", exc.message)
        except SagacityError as exc:
            return error_page(request, None, _status_for(exc), "Unavailable", exc.message)
        if principal is None or session is None:
            limiter.failed(client)
            log.info("console: failed sign-in from %s", client)
            return render(
                request,
                "login.html",
                None,
                401,
                login_csrf=request.cookies.get(LOGIN_CSRF_COOKIE),
                next=next_page,
                message="unknown token",
            )
        limiter.succeeded(client)
        log.info("console: %s signed in from %s", principal.name, client)
        response = RedirectResponse(next_page, status_code=303)
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=int(sessions.ttl_s),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/ui",
        )
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/ui/login")
        return response

    async def logout(request: Request, viewer: _Viewer) -> Response:
        await run_in_threadpool(sessions.delete, viewer.session_id)
        log.info("console: %s signed out", viewer.principal.name)
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    # -- inbox -------------------------------------------------------------------------------
    def deadline_of(row: RequestRow) -> int | None:
        return sagacity.approval_deadline_us(row.request(), seen_at_us=row.seen_at_us)

    # Who asked is the actor of the request's own entry, which never changes once journaled,
    # so each is read from the chain once (the inbox reloads every few seconds).
    writers: dict[tuple[str, int], str] = {}

    def writer_of(row: RequestRow) -> str:
        key = (row.saga_id, row.seq)
        if key in writers:
            return writers[key]
        try:
            entries = sagacity.entries(row.saga_id)
        except SagacityError:
            return "?"
        actor = next((e.actor for e in entries if e.seq == row.seq), None) or "?"
        if len(writers) > 10_000:
            writers.clear()
        writers[key] = actor
        return actor

    async def inbox(request: Request, viewer: _Viewer) -> Response:
        def read() -> list[dict[str, Any]]:
            rows = service.requests(viewer.principal, states=OPEN_STATES)
            now = now_us()
            out = []
            for row in rows:
                deadline = deadline_of(row)
                out.append(
                    {
                        "row": row,
                        "writer": writer_of(row),
                        "age": _span((now - row.requested_at_us) / 1e6),
                        "left": _span((deadline - now) / 1e6) if deadline else "no limit",
                    }
                )
            return out

        items = await run_in_threadpool(read)
        return render(request, "inbox.html", viewer, items=items, refresh_s=refresh_s)

    # -- a request ---------------------------------------------------------------------------
    def request_context(viewer: _Viewer, saga_id: str, seq: int) -> dict[str, Any]:
        row = service.get(viewer.principal, saga_id, seq)
        entries = load_chain(sagacity.journal, saga_id)
        before = [e for e in entries if e.seq < seq]
        after = [e for e in entries if e.seq > seq]
        deadline = deadline_of(row)
        return {
            "row": row,
            "before": before,
            "after": after,
            "pretty": _pretty(row.payload),
            "redacted": _redacted(row.payload),
            "visible": _visible_whitespace(row.payload),
            "payload_bytes": len(row.payload.encode("utf-8")),
            "computed_sha256": payload_sha256(row.payload),
            "hash_matches": row.payload_sha256 == payload_sha256(row.payload),
            "deadline": deadline,
            "left": _span((deadline - now_us()) / 1e6) if deadline else "no limit",
            "writer": writer_of(row),
            "signed_by_me": viewer.principal.name in row.signed_by,
            "undo": _undo.undo_list(before, sagacity.registry),  # what an undo puts back
        }

    def parse_seq(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ApprovalNotFound(f"no request at seq {raw!r}") from None
        if value < 1 or value > 2**31 - 1:
            raise ApprovalNotFound(f"no request at seq {raw!r}")
        return value

    async def request_page(request: Request, viewer: _Viewer) -> Response:
        saga_id = request.path_params["saga_id"]
        seq = parse_seq(request.path_params["seq"])
        context = await run_in_threadpool(request_context, viewer, saga_id, seq)
        done = request.query_params.get("done")
        message = {
            "approved": "Your approval is recorded on the chain.",
            "rejected": "Your rejection is recorded; the saga is handed to compensation.",
        }.get(done or "")
        return render(request, "request.html", viewer, message=message, **context)

    async def decide(request: Request, viewer: _Viewer) -> Response:
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

        def act() -> None:
            if decision == "approve":
                if request_hash is None:
                    raise InvalidArgumentError("the form names no request hash: reload the page")
                service.approve(viewer.principal, saga_id, seq, request_hash=request_hash)
            elif decision == "reject":
                service.reject(viewer.principal, saga_id, seq, reason=reason_text)
            else:
                raise InvalidArgumentError("choose approve or reject")

        try:
            await run_in_threadpool(act)
        except (ApprovalError, InvalidArgumentError) as exc:
            if isinstance(exc, PermissionDeniedError | ApprovalNotFound):
                raise
            context = await run_in_threadpool(request_context, viewer, saga_id, seq)
            return render(
                request,
                "request.html",
                viewer,
                409 if isinstance(exc, ApprovalError) else 422,
                refusal=exc.message,
                message=None,
                **context,
            )
        log.info("console: %s %s %s/%s", viewer.principal.name, decision, saga_id, seq)
        done = "approved" if decision == "approve" else "rejected"
        return RedirectResponse(
            f"/ui/requests/{quote(saga_id, safe='')}/{seq}?done={done}", status_code=303
        )

    # -- attention ---------------------------------------------------------------------------
    def attention_context(viewer: _Viewer) -> dict[str, Any]:
        sagas = []
        for row in service.store.attention():
            try:
                entries = sagacity.entries(row.saga_id)
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
        since = now_us() - _SEVEN_DAYS_US
        readable = viewer.principal.may_read
        expired = [
            r for r in service.store.closed(("expired",), since_us=since) if readable([r.tool])
        ]
        refused = [
            r for r in service.store.closed(("refused",), since_us=since) if readable([r.tool])
        ]
        return {
            "sagas": sagas,
            "expired": expired,
            "refused": refused,
            "outcomes": [o.value for o in SettlementOutcome],
        }

    async def attention(request: Request, viewer: _Viewer) -> Response:
        context = await run_in_threadpool(attention_context, viewer)
        done = request.query_params.get("done")
        message = "The settlement is recorded; compensation follows." if done else None
        return render(request, "attention.html", viewer, message=message, **context)

    async def settle(request: Request, viewer: _Viewer) -> Response:
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
            lambda: service.settle(viewer.principal, saga_id, seq, outcome=outcome, note=note)
        )
        log.info("console: %s settled %s/%s %s", viewer.principal.name, saga_id, seq, outcome)
        return RedirectResponse("/ui/attention?done=settled", status_code=303)

    # -- a saga ------------------------------------------------------------------------------
    def saga_context(viewer: _Viewer, saga_id: str) -> dict[str, Any]:
        entries = sagacity.entries(saga_id)
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

    async def saga_page(request: Request, viewer: _Viewer) -> Response:
        context = await run_in_threadpool(saga_context, viewer, request.path_params["saga_id"])
        return render(request, "saga.html", viewer, **context)

    async def saga_bundle(request: Request, viewer: _Viewer) -> Response:
        saga_id = request.path_params["saga_id"]
        if archive is None:
            raise UnknownSagaError("no archive is configured for this service", saga_id=saga_id)

        def bundle() -> bytes:
            # The live chain names the saga's tools; an auditor reads a saga the topic no
            # longer holds as well.
            if not may_read(viewer.principal, sagacity.entries(saga_id)):
                check_readable(viewer.principal, saga_id, ())
            assert archive is not None
            return archive.bundle(saga_id)

        data = await run_in_threadpool(bundle)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in saga_id)
        return Response(
            data,
            media_type="application/zip",
            headers={"content-disposition": f'attachment; filename="audit-{safe}.zip"'},
        )

    # -- metrics -----------------------------------------------------------------------------
    async def metrics_page(request: Request, viewer: _Viewer) -> Response:
        def read() -> dict[str, Any]:
            now = now_us()
            rows = [
                r
                for r in service.store.decided(since_us=now - _SEVEN_DAYS_US)
                if viewer.principal.may_read([r.tool])
            ]
            windows = []
            for label, seconds in _metrics.WINDOWS:
                tools = _metrics.figures(rows, now_us=now, window_s=seconds)
                windows.append({"label": label, "tools": tools, "chart": _metrics.chart(tools)})
            return {"windows": windows}

        context = await run_in_threadpool(read)
        return render(request, "metrics.html", viewer, **context)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_page(request, None, 404, "Not found", "no such page")

    async def favicon(request: Request) -> Response:
        return PlainTextResponse("", status_code=404)

    routes = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", page(logout, post=True), methods=["POST"]),
        Route("/", page(inbox), methods=["GET"]),
        Route("/requests/{saga_id}/{seq}", page(request_page), methods=["GET"]),
        Route("/requests/{saga_id}/{seq}", page(decide, post=True), methods=["POST"]),
        Route("/attention", page(attention), methods=["GET"]),
        Route("/sagas/{saga_id}", page(saga_page), methods=["GET"]),
        Route("/sagas/{saga_id}/bundle", page(saga_bundle), methods=["GET"]),
        Route("/sagas/{saga_id}/undo", page(_undo.undo_page(sagacity, render)), methods=["GET"]),
        Route("/sagas/{saga_id}/settle/{seq}", page(settle, post=True), methods=["POST"]),
        Route("/metrics", page(metrics_page), methods=["GET"]),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.add_middleware(SecurityHeaders)
    return app
