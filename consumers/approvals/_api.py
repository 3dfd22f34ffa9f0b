"""The approvals HTTP API (FastAPI): the seed's endpoints, authenticated, with typed errors.

Every error is a JSON object ``{"detail": "<sentence>"}`` with the status the table in
docs/operations/approvals.md gives: 401 no or bad credentials, 403 a tool the principal may
not decide for, 404 an unknown saga or request, 409 a refused decision or resume, 413 a body
over the limit, 422 a malformed body or an id outside the documented charset.

The routes, by resource: requests (:mod:`._api_requests`), deciding (:mod:`._api_decisions`),
sagas (:mod:`._api_sagas`), standing grants (:mod:`._api_grants`) and figures
(:mod:`._api_stats`); their shapes in :mod:`._api_models`, what they share in
:mod:`._api_context`, the body limit in :mod:`._api_limits`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from sagacity.consumers.approvals import (
    _api_decisions,
    _api_grants,
    _api_requests,
    _api_sagas,
    _api_stats,
)
from sagacity.consumers.approvals._api_context import ApiContext
from sagacity.consumers.approvals._api_limits import DEFAULT_MAX_BODY, Limits
from sagacity.consumers.approvals._auth import Authenticator
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals._statuses import status_for
from sagacity.errors import (
    SagacityError,
)

log = logging.getLogger("sagacity.approvals")


async def _sagacity_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SagacityError)
    status = status_for(exc)
    if status >= 500:
        log.error("%s %s: %s", request.method, request.url.path, exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, status_code=422)


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
    app.state.approvals = ApiContext(
        service=service, auth=auth, insecure_dev=insecure_dev, metrics=metrics, health=health
    )
    app.add_exception_handler(SagacityError, _sagacity_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    for routes in (_api_requests, _api_decisions, _api_grants, _api_sagas, _api_stats):
        app.include_router(routes.router)
    app.add_middleware(Limits, max_body=max_body, insecure=insecure_dev)
    return app
