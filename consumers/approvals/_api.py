"""The approvals HTTP API (FastAPI): the seed's endpoints, authenticated, with typed errors.

Every error is a JSON object ``{"detail": "<sentence>"}`` with the status the table in
docs/operations/approvals.md gives: 401 no or bad credentials, 403 a tool the principal may
not decide for, 404 an unknown saga or request, 409 a refused decision or resume, 413 a body
over the limit, 422 a malformed body or an id outside the documented charset.
"""

# No ``from __future__ import annotations``: FastAPI must evaluate the endpoints' annotations,
# which name dependencies local to create_app.
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity.consumers.approvals._auth import ANY_TOOL, Authenticator, Principal
from sagacity.consumers.approvals._service import ApprovalService, Decided
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFound,
    AuthenticationError,
    ChainIntegrityError,
    ConfigurationError,
    ConstraintViolation,
    DeclarationError,
    InvalidArgumentError,
    JournalError,
    PayloadMismatchError,
    PermissionDeniedError,
    PersistenceError,
    SagacityError,
    SerializationError,
    TailMovedError,
    UnknownSagaError,
    UnverifiableApprovalError,
    WriterConflictError,
)
from sagacity.ports import OPEN_STATES, RowState

log = logging.getLogger("sagacity.approvals")

SAGA_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Saga ids the API addresses: 1 to 128 characters of letters, digits and ``._:@-``, starting
with a letter or digit (no ``/``, no ``..`` prefix, nothing a path or shell would read)."""
MAX_SEQ = 2**31 - 1
INSECURE_HEADER = "X-Sagacity-Insecure-Dev"
INSECURE_VALUE = "approver identity is taken from the request body and NOT authenticated"
ANONYMOUS = "anonymous"
"""The requester journaled for an ``--insecure-dev`` resume naming nobody, with no approver on
record."""
DEFAULT_MAX_BODY = 256 * 1024
_TEXT = r"^[^\x00]*$"
"""Journal text never holds U+0000 (stated in the schema so clients can know it)."""

SagaId = Annotated[str, Path(pattern=SAGA_ID_PATTERN, max_length=128, description=SAGA_ID_PATTERN)]
Seq = Annotated[int, Path(ge=1, le=MAX_SEQ, description="the AWAITING_APPROVAL entry's seq")]


def _storable(value: str | None) -> str | None:
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError("must not contain U+0000")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from exc
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    approver: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=_TEXT,
        description="only read with --insecure-dev; otherwise it must be absent or equal the "
        "authenticated principal (another name is refused with 403)",
    )

    @field_validator("approver")
    @classmethod
    def _approver_text(cls, value: str | None) -> str | None:
        return _storable(value)


class ApproveBody(_Body):
    """``POST /sagacity/approve/…``: the request entry's hash the approver was shown."""

    request_hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the `request_hash` of the request as shown (GET /sagacity/approvals/…): "
        "required when authenticated; the approval is refused (409, journaled "
        "APPROVAL_REFUSED) when the chain's request at that seq is another",
    )


class RejectBody(_Body):
    """``POST /sagacity/reject/…`` (the body is optional)."""

    reason: str | None = Field(default=None, max_length=4096, pattern=_TEXT)

    @field_validator("reason")
    @classmethod
    def _reason_text(cls, value: str | None) -> str | None:
        return _storable(value)


class ResumeBody(_Body):
    """``POST /sagacity/resume/…``: the live payload, byte for byte."""

    payload: str = Field(
        pattern=_TEXT, description="the exact payload that was approved (compact JSON)"
    )

    @field_validator("payload")
    @classmethod
    def _payload_text(cls, value: str) -> str:
        checked = _storable(value)
        assert checked is not None
        return checked


class SettleBody(_Body):
    """``POST /sagacity/settle/…``: what the person found out about the suspect step."""

    outcome: Literal["executed", "not-executed", "fixed-by-hand"] = Field(
        description="did the call in doubt take effect? (docs/console.md)"
    )
    note: str = Field(
        min_length=1,
        max_length=4096,
        pattern=r"^[^\x00]*[^\x00\s][^\x00]*$",
        description="what the person found out (not blank)",
    )

    @field_validator("note")
    @classmethod
    def _note_text(cls, value: str) -> str:
        checked = _storable(value)
        assert checked is not None
        return checked


class SettlementOut(BaseModel):
    """The saga after a settlement (``COMPENSATION_PENDING``: handed to compensation)."""

    saga_id: str
    seq: int
    outcome: str
    settled_by: str
    saga_status: str
    error: str | None = None


class ErrorOut(BaseModel):
    """An error."""

    detail: str


class RequestOut(BaseModel):
    """An approval request as the working table holds it (the chain is the evidence)."""

    saga_id: str
    seq: int
    tool: str
    payload: str
    payload_sha256: str | None
    requested_at_us: int
    expires_at_us: int | None
    deadline_us: int | None
    signatures_required: int
    policy_version: str
    reversibility: str
    state: str
    signed_by: list[str]
    decision: str | None
    decided_by: str | None
    decided_at_us: int | None
    decision_policy_version: str | None
    closed_at_us: int | None
    request_hash: str | None = Field(
        description="the request entry's hash: what an approval names (it chains to the whole "
        "saga before the request)"
    )


class RequestsOut(BaseModel):
    """A list of requests."""

    requests: list[RequestOut]


class DecisionOut(BaseModel):
    """The outcome of a decision or resume."""

    request: RequestOut
    saga_status: str | None = None
    value: str | None = None
    error: str | None = None


class SagaOut(BaseModel):
    """A saga: status, whether its chain verifies, open requests and the chain itself."""

    saga_id: str
    status: str
    verified: bool
    verification: dict[str, Any] | None
    pending: list[dict[str, Any]]
    entries: list[dict[str, Any]]


class StatsOut(BaseModel):
    """Gate metrics over a window of decision times."""

    window_s: float
    approved: int
    rejected: int
    expired: int
    pending: int
    approve_ratio: float | None
    oldest_pending_age_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_covers: str


def _status_for(exc: SagacityError) -> int:
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, PermissionDeniedError):
        return 403
    if isinstance(exc, UnknownSagaError | ApprovalNotFound):
        return 404
    if isinstance(exc, InvalidArgumentError | SerializationError):
        return 422
    if isinstance(exc, DeclarationError | ConfigurationError):
        return 503
    if isinstance(
        exc,
        AlreadyDecidedError
        | ApprovalMissingError
        | PayloadMismatchError
        | UnverifiableApprovalError
        | ConstraintViolation
        | ApprovalExpiredError
        | ChainIntegrityError
        | WriterConflictError
        | TailMovedError
        | ApprovalError,
    ):
        return 409
    if isinstance(exc, JournalError | PersistenceError):
        return 503
    return 500


class _Limits:
    """ASGI middleware: body size limit, UTF-8 bodies, and the insecure-dev header."""

    def __init__(self, app: ASGIApp, *, max_body: int, insecure: bool) -> None:
        self.app = app
        self.max_body = max_body
        self.insecure = insecure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        insecure = self.insecure

        async def send_marked(message: Message) -> None:
            if insecure and message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((INSECURE_HEADER.lower().encode(), INSECURE_VALUE.encode()))
                message = {**message, "headers": headers}
            await send(message)

        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await self._refuse(send_marked, 413, f"request body over {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._refuse(send_marked, 413, f"request body over {self.max_body} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                await self._refuse(send_marked, 422, "request body is not valid UTF-8")
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_marked)

    @staticmethod
    async def _refuse(send: Send, status: int, detail: str) -> None:
        response = JSONResponse({"detail": detail}, status_code=status)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "no or bad credentials"},
    403: {
        "model": ErrorOut,
        "description": "the principal may not decide or read for this tool, is an agent, or "
        "made the request itself",
    },
    404: {"model": ErrorOut, "description": "unknown saga or request"},
    413: {"model": ErrorOut, "description": "request body too large"},
    422: {"model": ErrorOut, "description": "malformed body or id"},
    503: {"model": ErrorOut, "description": "journal or database unavailable"},
}
_DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    409: {"model": ErrorOut, "description": "refused: already decided, no approval, changed"},
}


def create_app(
    service: ApprovalService,
    *,
    auth: Authenticator | None,
    insecure_dev: bool = False,
    max_body: int = DEFAULT_MAX_BODY,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    health: Callable[[], dict[str, Any]] | None = None,
) -> FastAPI:
    """The ASGI application.

    Args:
        service: the decisions.
        auth: principals by token; required unless ``insecure_dev``.
        insecure_dev: take the approver's name from the body (demo only; loudly marked).
        max_body: the largest request body accepted, in bytes.
        metrics: ``() -> (body, content_type)`` for ``/metrics``.
        health: ``() -> details`` raising when unhealthy, for ``/healthz``.
    """
    if auth is None and not insecure_dev:
        raise ValueError("an auth config is required unless insecure_dev is set")
    app = FastAPI(
        title="Sagacity approvals",
        version="1",
        description="Human approval gates: list, approve, reject and resume gated tool calls.",
    )
    bearer = HTTPBearer(auto_error=False, description="a token listed in the auth file")

    @app.exception_handler(SagacityError)
    async def _sagacity_error(request: Request, exc: SagacityError) -> Response:
        status = _status_for(exc)
        if status >= 500:
            log.error("%s %s: %s", request.method, request.url.path, exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()))
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, status_code=422)

    def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        if insecure_dev:
            # The name comes from the body (read by each endpoint); any tool may be decided.
            return Principal(name="", tools=frozenset({ANY_TOOL}), authenticated=False)
        assert auth is not None
        if credentials is None or not credentials.credentials:
            raise AuthenticationError("missing bearer token")
        found = auth.authenticate(credentials.credentials)
        if found is None:
            raise AuthenticationError("unknown bearer token")
        found.check_person()  # an agent's token neither decides nor reads here
        return found

    def decider(who: Principal, body: _Body | None) -> Principal:
        named = body.approver if body is not None else None
        if not who.authenticated:
            if not named:
                raise InvalidArgumentError(
                    "approver is required in the body when the service runs with --insecure-dev"
                )
            return Principal(name=named, tools=who.tools, authenticated=False)
        if named is not None and named != who.name:
            raise PermissionDeniedError(
                f"the approver is the authenticated principal ({who.name}); remove 'approver' "
                "from the body"
            )
        return who

    def requester(who: Principal, body: ResumeBody, saga_id: str, seq: int) -> Principal:
        # The seed's resume body is {"payload": ...} alone: under --insecure-dev the requester
        # is then the approver on record (the last signature), else "anonymous".
        if who.authenticated or body.approver is not None:
            return decider(who, body)
        signed = service.get(who, saga_id, seq).signed_by
        name = signed[-1] if signed else ANONYMOUS
        return Principal(name=name, tools=who.tools, authenticated=False)

    def request_out(row: Any) -> RequestOut:
        data = row.to_dict()

        deadline = service.sagacity.approval_deadline_us(row.request(), seen_at_us=row.seen_at_us)
        return RequestOut(**data, deadline_us=deadline)

    def decision_out(decided: Decided) -> DecisionOut:
        result = decided.result
        return DecisionOut(
            request=request_out(decided.request),
            saga_status=result.status.value if result is not None else None,
            value=None if result is None or result.value is None else str(result.value),
            error=result.error if result is not None else None,
        )

    @app.get("/sagacity/approvals", response_model=RequestsOut, responses=_ERRORS)
    def list_requests(
        who: Annotated[Principal, Depends(principal)],
        state: Annotated[
            str,
            Query(
                pattern=r"^(open|all|pending|approved|rejected|expired|refused|resumed|ended)$",
                description="open (pending or approved, the default), all, or one state",
            ),
        ] = "open",
        limit: Annotated[int, Query(ge=1, le=5000, description="oldest first")] = 500,
    ) -> RequestsOut:
        """Requests waiting for a decision or a resume (for the caller's tools), oldest first."""
        states: tuple[str, ...] = (
            OPEN_STATES
            if state == "open"
            else tuple(s.value for s in RowState)
            if state == "all"
            else (state,)
        )
        return RequestsOut(
            requests=[request_out(r) for r in service.requests(who, states=states, limit=limit)]
        )

    @app.get("/sagacity/approvals/{saga_id}/{seq}", response_model=RequestOut, responses=_ERRORS)
    def show_request(
        saga_id: SagaId, seq: Seq, who: Annotated[Principal, Depends(principal)]
    ) -> RequestOut:
        """One request."""
        return request_out(service.get(who, saga_id, seq))

    @app.post(
        "/sagacity/approve/{saga_id}/{seq}", response_model=DecisionOut, responses=_DECISION_ERRORS
    )
    def approve(
        saga_id: SagaId,
        seq: Seq,
        who: Annotated[Principal, Depends(principal)],
        body: ApproveBody | None = None,
    ) -> DecisionOut:
        """Record the caller's approval on the chain (``APPROVED``), bound to the request it
        names; nothing runs yet."""
        shown = body.request_hash if body is not None else None
        return decision_out(service.approve(decider(who, body), saga_id, seq, request_hash=shown))

    @app.post(
        "/sagacity/reject/{saga_id}/{seq}", response_model=DecisionOut, responses=_DECISION_ERRORS
    )
    def reject(
        saga_id: SagaId,
        seq: Seq,
        who: Annotated[Principal, Depends(principal)],
        body: RejectBody | None = None,
    ) -> DecisionOut:
        """Record the rejection (``REJECTED``) and hand the saga to compensation."""
        reason = body.reason if body is not None else None
        return decision_out(service.reject(decider(who, body), saga_id, seq, reason=reason))

    @app.post(
        "/sagacity/resume/{saga_id}/{seq}", response_model=DecisionOut, responses=_DECISION_ERRORS
    )
    def resume(
        saga_id: SagaId, seq: Seq, who: Annotated[Principal, Depends(principal)], body: ResumeBody
    ) -> DecisionOut:
        """Run the approved call with this exact payload (``INTENT`` then ``EXECUTED``)."""
        resumer = requester(who, body, saga_id, seq)
        return decision_out(service.resume(resumer, saga_id, seq, body.payload))

    @app.post(
        "/sagacity/settle/{saga_id}/{seq}",
        response_model=SettlementOut,
        responses=_DECISION_ERRORS,
    )
    def settle(
        saga_id: SagaId,
        seq: Annotated[int, Path(ge=1, le=MAX_SEQ, description="the suspect step's seq")],
        who: Annotated[Principal, Depends(principal)],
        body: SettleBody,
    ) -> SettlementOut:
        """Settle a SUSPECT step (``SUSPECT_SETTLED``) and hand the saga to compensation."""
        person = decider(who, body)
        result = service.settle(person, saga_id, seq, outcome=body.outcome, note=body.note)
        return SettlementOut(
            saga_id=saga_id,
            seq=seq,
            outcome=body.outcome,
            settled_by=person.name,
            saga_status=result.status.value,
            error=result.error,
        )

    @app.get("/sagacity/sagas/{saga_id}", response_model=SagaOut, responses=_ERRORS)
    def show_saga(saga_id: SagaId, who: Annotated[Principal, Depends(principal)]) -> SagaOut:
        """The saga's status and its chain, for a principal that decides one of its tools or
        audits (any other gets the 404 of an unknown saga); redaction salts are withheld."""
        return SagaOut(**service.saga(who, saga_id))

    @app.get("/sagacity/stats", response_model=StatsOut, responses=_ERRORS)
    def stats(
        who: Annotated[Principal, Depends(principal)],
        window_s: Annotated[float, Query(gt=0, le=366 * 86400, description="seconds")] = 86400,
    ) -> StatsOut:
        """Approve/reject ratio and request-to-decision latency over the window."""
        figures = service.store.stats(now_us=service.sagacity.now_us(), window_s=window_s)
        return StatsOut(**figures.to_dict())

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        if metrics is None:
            return Response(status_code=404)
        body, content_type = metrics()
        return Response(content=body, media_type=content_type)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> Response:
        try:
            details = health() if health is not None else {}
        except Exception as exc:
            return JSONResponse({"ok": False, "detail": str(exc)}, status_code=503)
        return JSONResponse({"ok": True, **details})

    app.add_middleware(_Limits, max_body=max_body, insecure=insecure_dev)
    return app
