"""The approvals API's documented shapes: path parameters, request bodies, responses, errors.

Every body is strict (no extra field, no coercion) and every text field refuses what the
journal cannot hold (U+0000, lone surrogates), so a malformed request is a 422 before it
reaches the service.  The OpenAPI document is generated from these.
"""

# No ``from __future__ import annotations``: FastAPI and pydantic evaluate these annotations.
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, field_validator

SAGA_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Saga ids the API addresses: 1 to 128 characters of letters, digits and ``._:@-``, starting
with a letter or digit (no ``/``, no ``..`` prefix, nothing a path or shell would read)."""
MAX_SEQ = 2**31 - 1
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


class ApproverBody(BaseModel):
    """A body that may name the approver (read only with ``--insecure-dev``)."""

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


class ApproveBody(ApproverBody):
    """``POST /sagacity/approve/…``: the request entry's hash the approver was shown."""

    request_hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the `request_hash` of the request as shown (GET /sagacity/approvals/…): "
        "required when authenticated; the approval is refused (409, journaled "
        "APPROVAL_REFUSED) when the chain's request at that seq is another",
    )


class RejectBody(ApproverBody):
    """``POST /sagacity/reject/…`` (the body is optional)."""

    reason: str | None = Field(default=None, max_length=4096, pattern=_TEXT)

    @field_validator("reason")
    @classmethod
    def _reason_text(cls, value: str | None) -> str | None:
        return _storable(value)


class ResumeBody(ApproverBody):
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


class SettleBody(ApproverBody):
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
    deadline_us: int | None = Field(
        description="when the request lapses by the service's clock and declarations, with the "
        "verified operator extensions (null: never)"
    )
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
    routed_to: list[str] | None = Field(
        default=None,
        description="whom the request's route offers it to now (group:NAME and principals of "
        "the tiers reached at its age; docs/operations/routing.md); null: its tool is not routed",
    )
    extended_by_us: int = Field(
        default=0,
        description="the operator extensions of the deadline that verify under the service's "
        "pinned operator key (already in deadline_us)",
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


ERRORS: dict[int | str, dict[str, Any]] = {
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
DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    409: {"model": ErrorOut, "description": "refused: already decided, no approval, changed"},
}
