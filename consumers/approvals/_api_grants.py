"""Standing grants: make one, list a saga's, revoke one (docs/operations/grants.md).

Each acts as the caller (:func:`~._api_context.decider`) through :mod:`._grants`, as the
console's grants page does.
"""

# No ``from __future__ import annotations``: FastAPI evaluates the endpoints' annotations.
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from sagacity.consumers.approvals import _grants
from sagacity.consumers.approvals._api_context import Api, Who, decider
from sagacity.consumers.approvals._api_models import (
    DECISION_ERRORS,
    ERRORS,
    ApproverBody,
    SagaId,
)
from sagacity.gate._grant_rules import MAX_RULE_CHARS, MAX_RULES

router = APIRouter()
GrantId = Annotated[str, Path(pattern=r"^[0-9A-Za-z_-]{1,64}$", description="the grant's id")]


class GrantBody(ApproverBody):
    """``POST /sagacity/grant/{saga_id}``: the tool, its argument rules and how long."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00]*$")
    rules: list[Annotated[str, Field(min_length=1, max_length=MAX_RULE_CHARS)]] = Field(
        min_length=1,
        max_length=MAX_RULES,
        description='argument rules, all of which a call must satisfy ("amount <= 100", '
        '"to in [\\"a@x\\"]")',
    )
    ttl_s: int = Field(
        ge=1,
        le=_grants.MAX_GRANT_TTL_S,
        strict=False,  # a JSON number with no fraction (60.0) is a whole number of seconds
        description="seconds the grant stands",
    )


class RevokeBody(ApproverBody):
    """``POST /sagacity/revoke/{saga_id}/{grant_id}`` (the body is optional)."""


class GrantOut(BaseModel):
    """A grant and whether it stands now."""

    grant_id: str
    saga_id: str
    seq: int
    tool: str
    rules: str | None
    expires_at_us: int | None
    agent: str | None
    granted_by: str | None
    granted_at_us: int
    status: str
    reason: str | None = None
    revoked_by: str | None = None
    revoked_at_us: int | None = None
    revoked_seq: int | None = None


def _out(data: dict[str, Any]) -> GrantOut:
    return GrantOut(**data)


@router.post("/sagacity/grant/{saga_id}", response_model=GrantOut, responses=DECISION_ERRORS)
def grant(saga_id: SagaId, api: Api, who: Who, body: GrantBody) -> GrantOut:
    """Grant ``tool`` for the saga: calls whose arguments satisfy every rule run without a
    new request until the grant lapses or is revoked (``GRANTED``, signed)."""
    person = decider(who, body)
    view = _grants.grant(api.service, person, saga_id, body.tool, body.rules, ttl_s=body.ttl_s)
    return _out(view.to_dict())


@router.get("/sagacity/grants/{saga_id}", response_model=list[GrantOut], responses=ERRORS)
def grants(saga_id: SagaId, api: Api, who: Who) -> list[GrantOut]:
    """The saga's grants, each with its standing now (active, revoked, expired, not counted)."""
    return [_out(v.to_dict()) for v in _grants.grants(api.service, who, saga_id)]


@router.post(
    "/sagacity/revoke/{saga_id}/{grant_id}",
    response_model=GrantOut,
    responses=DECISION_ERRORS,
)
def revoke(
    saga_id: SagaId, grant_id: GrantId, api: Api, who: Who, body: RevokeBody | None = None
) -> GrantOut:
    """Revoke the grant (``GRANT_REVOKED``, signed): it covers no call after it."""
    person = decider(who, body)
    return _out(_grants.revoke(api.service, person, saga_id, grant_id).to_dict())
