"""Deciding: approve, reject, resume an approved call, settle a suspect step.

Each records, as the caller (:func:`~._api_context.decider`), through the approvals service's
own decision path, exactly what the console records.
"""

# No ``from __future__ import annotations``: FastAPI evaluates the endpoints' annotations.
from typing import Annotated

from fastapi import APIRouter, Path

from sagacity.consumers.approvals._api_context import (
    Api,
    Who,
    decider,
    decision_out,
    requester,
)
from sagacity.consumers.approvals._api_models import (
    DECISION_ERRORS,
    MAX_SEQ,
    ApproveBody,
    DecisionOut,
    RejectBody,
    ResumeBody,
    SagaId,
    Seq,
    SettleBody,
    SettlementOut,
)

router = APIRouter()


@router.post(
    "/sagacity/approve/{saga_id}/{seq}", response_model=DecisionOut, responses=DECISION_ERRORS
)
def approve(
    saga_id: SagaId, seq: Seq, api: Api, who: Who, body: ApproveBody | None = None
) -> DecisionOut:
    """Record the caller's approval on the chain (``APPROVED``), bound to the request it
    names; nothing runs yet."""
    shown = body.request_hash if body is not None else None
    decided = api.service.approve(decider(who, body), saga_id, seq, request_hash=shown)
    return decision_out(api, decided)


@router.post(
    "/sagacity/reject/{saga_id}/{seq}", response_model=DecisionOut, responses=DECISION_ERRORS
)
def reject(
    saga_id: SagaId, seq: Seq, api: Api, who: Who, body: RejectBody | None = None
) -> DecisionOut:
    """Record the rejection (``REJECTED``) and hand the saga to compensation."""
    reason = body.reason if body is not None else None
    return decision_out(api, api.service.reject(decider(who, body), saga_id, seq, reason=reason))


@router.post(
    "/sagacity/resume/{saga_id}/{seq}", response_model=DecisionOut, responses=DECISION_ERRORS
)
def resume(saga_id: SagaId, seq: Seq, api: Api, who: Who, body: ResumeBody) -> DecisionOut:
    """Run the approved call with this exact payload (``INTENT`` then ``EXECUTED``)."""
    resumer = requester(api, who, body, saga_id, seq)
    return decision_out(api, api.service.resume(resumer, saga_id, seq, body.payload))


@router.post(
    "/sagacity/settle/{saga_id}/{seq}",
    response_model=SettlementOut,
    responses=DECISION_ERRORS,
)
def settle(
    saga_id: SagaId,
    seq: Annotated[int, Path(ge=1, le=MAX_SEQ, description="the suspect step's seq")],
    api: Api,
    who: Who,
    body: SettleBody,
) -> SettlementOut:
    """Settle a SUSPECT step (``SUSPECT_SETTLED``) and hand the saga to compensation."""
    person = decider(who, body)
    result = api.service.settle(person, saga_id, seq, outcome=body.outcome, note=body.note)
    return SettlementOut(
        saga_id=saga_id,
        seq=seq,
        outcome=body.outcome,
        settled_by=person.name,
        saga_status=result.status.value,
        error=result.error,
    )
