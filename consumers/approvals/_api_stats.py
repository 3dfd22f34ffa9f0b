"""The gate's figures (``/sagacity/stats``) and the service's own: ``/metrics`` (Prometheus)
and ``/healthz``, the last two outside the OpenAPI document."""

# No ``from __future__ import annotations``: FastAPI evaluates the endpoints' annotations.
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response

from sagacity.consumers.approvals._api_context import Api, Who
from sagacity.consumers.approvals._api_models import ERRORS, StatsOut

router = APIRouter()


@router.get("/sagacity/stats", response_model=StatsOut, responses=ERRORS)
def stats(
    api: Api,
    who: Who,
    window_s: Annotated[float, Query(gt=0, le=366 * 86400, description="seconds")] = 86400,
) -> StatsOut:
    """Approve/reject ratio and request-to-decision latency over the window."""
    service = api.service
    figures = service.store.stats(now_us=service.sagacity.now_us(), window_s=window_s)
    return StatsOut(**figures.to_dict())


@router.get("/metrics", include_in_schema=False)
def prometheus(api: Api) -> Response:
    if api.metrics is None:
        return Response(status_code=404)
    body, content_type = api.metrics()
    return Response(content=body, media_type=content_type)


@router.get("/healthz", include_in_schema=False)
def healthz(api: Api) -> Response:
    try:
        details = api.health() if api.health is not None else {}
    except Exception as exc:
        return JSONResponse({"ok": False, "detail": str(exc)}, status_code=503)
    return JSONResponse({"ok": True, **details})
