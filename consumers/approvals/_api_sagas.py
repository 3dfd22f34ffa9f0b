"""``/sagacity/sagas``: a saga's status and its chain."""

# No ``from __future__ import annotations``: FastAPI evaluates the endpoints' annotations.
from fastapi import APIRouter

from sagacity.consumers.approvals._api_context import Api, Who
from sagacity.consumers.approvals._api_models import ERRORS, SagaId, SagaOut

router = APIRouter()


@router.get("/sagacity/sagas/{saga_id}", response_model=SagaOut, responses=ERRORS)
def show_saga(saga_id: SagaId, api: Api, who: Who) -> SagaOut:
    """The saga's status and its chain, for a principal that decides one of its tools or
    audits (any other gets the 404 of an unknown saga); redaction salts are withheld."""
    return SagaOut(**api.service.saga(who, saga_id))
