"""What every approvals API route shares: the API's state and who is asking.

The state is one :class:`ApiContext`, made by :func:`~._api.create_app` and kept on the
application (``app.state.approvals``); routes get it, and the authenticated principal, as
FastAPI dependencies (:func:`api_of`, :func:`principal`).
"""

# No ``from __future__ import annotations``: FastAPI evaluates the dependencies' annotations.
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sagacity.consumers.approvals._api_models import (
    ApproverBody,
    DecisionOut,
    RequestOut,
    ResumeBody,
)
from sagacity.consumers.approvals._auth import ANY_TOOL, Authenticator, Principal
from sagacity.consumers.approvals._deadline import row_deadline_us
from sagacity.consumers.approvals._service import ApprovalService, Decided
from sagacity.errors import AuthenticationError, InvalidArgumentError, PermissionDeniedError
from sagacity.ports import RequestRow

ANONYMOUS = "anonymous"
"""The requester journaled for an ``--insecure-dev`` resume naming nobody, with no approver on
record."""

bearer = HTTPBearer(auto_error=False, description="a token listed in the auth file")


@dataclass(frozen=True, kw_only=True)
class ApiContext:
    """The API's state.

    Args:
        service: the decisions.
        auth: principals by token; ``None`` only with ``insecure_dev``.
        insecure_dev: take the approver's name from the body (demo only; loudly marked).
        metrics: ``() -> (body, content_type)`` for ``/metrics``.
        health: ``() -> details`` raising when unhealthy, for ``/healthz``.
    """

    service: ApprovalService
    auth: Authenticator | None
    insecure_dev: bool
    metrics: Callable[[], tuple[bytes, str]] | None
    health: Callable[[], dict[str, Any]] | None


def api_of(request: Request) -> ApiContext:
    """The API serving ``request`` (set by :func:`~._api.create_app`)."""
    api = request.app.state.approvals
    assert isinstance(api, ApiContext)
    return api


Api = Annotated[ApiContext, Depends(api_of)]


def principal(
    api: Api,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The principal holding the bearer token (a person: an agent's token is refused).

    Raises:
        AuthenticationError: no token, or one the auth file does not list.
        PermissionDeniedError: an agent's token.
    """
    if api.insecure_dev:
        # The name comes from the body (read by each endpoint); any tool may be decided.
        return Principal(name="", tools=frozenset({ANY_TOOL}), authenticated=False)
    assert api.auth is not None
    if credentials is None or not credentials.credentials:
        raise AuthenticationError("missing bearer token")
    found = api.auth.authenticate(credentials.credentials)
    if found is None:
        raise AuthenticationError("unknown bearer token")
    found.check_person()  # an agent's token neither decides nor reads here
    return found


Who = Annotated[Principal, Depends(principal)]


def decider(who: Principal, body: ApproverBody | None) -> Principal:
    """Who decides: the authenticated principal, or under ``--insecure-dev`` the body's name.

    Raises:
        InvalidArgumentError: ``--insecure-dev`` and the body names nobody.
        PermissionDeniedError: the body names someone other than the authenticated principal.
    """
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


def requester(
    api: ApiContext, who: Principal, body: ResumeBody, saga_id: str, seq: int
) -> Principal:
    """Who resumes: as :func:`decider`, except an ``--insecure-dev`` body naming nobody."""
    # The seed's resume body is {"payload": ...} alone: under --insecure-dev the requester
    # is then the approver on record (the last signature), else "anonymous".
    if who.authenticated or body.approver is not None:
        return decider(who, body)
    signed = api.service.get(who, saga_id, seq).signed_by
    name = signed[-1] if signed else ANONYMOUS
    return Principal(name=name, tools=who.tools, authenticated=False)


def request_out(api: ApiContext, row: RequestRow) -> RequestOut:
    """A request as the API shows it, with its deadline by the service's declarations and
    whom its route offers it to now."""
    data = row.to_dict()
    return RequestOut(
        **data,
        deadline_us=row_deadline_us(api.service.sagacity, row),
        routed_to=api.service.routed_to(row),
    )


def decision_out(api: ApiContext, decided: Decided) -> DecisionOut:
    """A decision or resume as the API reports it."""
    result = decided.result
    return DecisionOut(
        request=request_out(api, decided.request),
        saga_status=result.status.value if result is not None else None,
        value=None if result is None or result.value is None else str(result.value),
        error=result.error if result is not None else None,
    )
