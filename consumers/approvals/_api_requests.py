"""``/sagacity/approvals``: the requests the caller may decide, and one request."""

# No ``from __future__ import annotations``: FastAPI evaluates the endpoints' annotations.
from typing import Annotated

from fastapi import APIRouter, Query

from sagacity.consumers.approvals._api_context import Api, Who, request_out
from sagacity.consumers.approvals._api_models import ERRORS, RequestOut, RequestsOut, SagaId, Seq
from sagacity.ports import OPEN_STATES, RowState

router = APIRouter()


@router.get("/sagacity/approvals", response_model=RequestsOut, responses=ERRORS)
def list_requests(
    api: Api,
    who: Who,
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
    rows = api.service.requests(who, states=states, limit=limit)
    return RequestsOut(requests=[request_out(api, r) for r in rows])


@router.get("/sagacity/approvals/{saga_id}/{seq}", response_model=RequestOut, responses=ERRORS)
def show_request(saga_id: SagaId, seq: Seq, api: Api, who: Who) -> RequestOut:
    """One request."""
    return request_out(api, api.service.get(who, saga_id, seq))
