"""Standing grants through the approvals service: make, list and revoke, as a principal.

The service's own :class:`~sagacity.Sagacity` signs and journals (:mod:`sagacity.gate._grant_desk`);
this module decides who may: a principal grants or revokes only a tool it may decide, never in
a saga whose agent (the writer that opened it, or a caller of its calls) is one of its own
identities, and reads a saga's grants only where it may read the saga.  The API's routes
(``/sagacity/grant/…``, ``/sagacity/grants/…``, ``/sagacity/revoke/…``) and the console's page
call these functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from sagacity.consumers.approvals._auth import Principal
from sagacity.consumers.approvals._reads import check_readable
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.entries._events import EventType
from sagacity.errors import (
    GrantRefusedError,
    PermissionDeniedError,
    SelfApprovalError,
    WriterConflictError,
)
from sagacity.gate._approval import load_chain
from sagacity.gate._grant_desk import GrantView
from sagacity.gate._requester import requesters
from sagacity.signing._writer_roles import SagaWriters

log = logging.getLogger("sagacity.approvals")

MAX_GRANT_TTL_S = 30 * 24 * 3600
_AGENTS_EVENTS = frozenset({EventType.SAGA_OPENED, EventType.AWAITING_APPROVAL, EventType.INTENT})
"""The entries that name the saga's agent (who opened it, asked, called): not a decision's or
a grant's, whose actor is the person who made it."""
_WRITE_ATTEMPTS = 3


def _refuse_own_saga(service: ApprovalService, principal: Principal, saga_id: str) -> None:
    """A grant is an approval of calls to come: nobody grants their own agent's saga."""
    entries = load_chain(service.sagacity.journal, saga_id)
    agents = {SagaWriters.of(entries).opener} | {
        who for entry in entries if entry.event_type in _AGENTS_EVENTS for who in requesters(entry)
    }
    shared = sorted(principal.identities & {a for a in agents if a})
    if shared:
        raise SelfApprovalError(
            f"{principal.name} may not grant or revoke in saga {saga_id!r}: its calls are "
            f"made by {', '.join(shared)}, an identity of {principal.name}; another approver must",
            saga_id=saga_id,
        )


def _authorise(principal: Principal, tool: str, saga_id: str) -> None:
    if not principal.may_decide(tool):
        raise PermissionDeniedError(
            f"{principal.name} may not grant or revoke tool {tool!r}", saga_id=saga_id
        )


def _retrying(write: Callable[[], GrantView]) -> GrantView:
    """Write again when another writer took the seq first (the core re-reads the chain)."""
    for attempt in range(1, _WRITE_ATTEMPTS + 1):
        try:
            return write()
        except WriterConflictError:
            if attempt == _WRITE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def grant(
    service: ApprovalService,
    principal: Principal,
    saga_id: str,
    tool: str,
    rules: Sequence[str],
    *,
    ttl_s: int,
) -> GrantView:
    """Journal ``principal``'s signed grant of ``tool`` in ``saga_id`` for ``ttl_s`` seconds.

    Raises:
        PermissionDeniedError: ``principal`` may not decide ``tool``.
        SelfApprovalError: the saga's agent is one of ``principal``'s identities.
        GrantRefusedError: as :meth:`Sagacity.grant` (a tool never granted, a rule that
            does not parse, a deadline out of range, an ended saga).
    """
    _authorise(principal, tool, saga_id)
    if not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or not 0 < ttl_s <= MAX_GRANT_TTL_S:
        raise GrantRefusedError(
            f"a grant lasts 1 second to {MAX_GRANT_TTL_S // 86400} days, got {ttl_s!r}",
            saga_id=saga_id,
        )
    _refuse_own_saga(service, principal, saga_id)
    s = service.sagacity
    view = _retrying(
        lambda: s.grant(
            saga_id,
            tool,
            list(rules),
            expires_at_us=s.now_us() + ttl_s * 1_000_000,
            grantor=principal.name,
        ),
    )
    log.info(
        "granted %s in saga %s to %s (grant %s)", tool, saga_id, principal.name, view.grant.grant_id
    )
    return view


def grants(service: ApprovalService, principal: Principal, saga_id: str) -> list[GrantView]:
    """The grants of ``saga_id`` (``principal`` must be able to read the saga).

    Raises:
        UnknownSagaError: no such saga, or ``principal`` may not read it.
    """
    entries = service.sagacity.entries(saga_id)
    check_readable(principal, saga_id, entries)
    return service.sagacity.grants(saga_id)


def revoke(
    service: ApprovalService, principal: Principal, saga_id: str, grant_id: str
) -> GrantView:
    """Journal ``principal``'s signed revocation of grant ``grant_id`` of ``saga_id``.

    Raises:
        PermissionDeniedError: ``principal`` may not decide the grant's tool.
        ApprovalNotFound / AlreadyDecidedError: as :meth:`Sagacity.revoke_grant`.
    """
    found = [v for v in grants(service, principal, saga_id) if v.grant.grant_id == grant_id]
    if found:
        _authorise(principal, found[0].grant.tool, saga_id)
    view = _retrying(lambda: service.sagacity.revoke_grant(saga_id, grant_id, principal.name))
    log.info("revoked grant %s of saga %s by %s", grant_id, saga_id, principal.name)
    return view
