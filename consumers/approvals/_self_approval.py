"""Nobody decides their own request: the one rule every decision path reaches.

The API, the console and the CLI (through the API) decide through :class:`ApprovalService`,
whose approve and reject call :func:`refuse_own_request` before the core journals anything.
The MCP server decides nothing (its principals are agents, which the approvals service
refuses), so a ``PRIVILEGED`` request's signatures all come from approvers that did not make it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sagacity.consumers.approvals._auth import Principal
from sagacity.entries._events import JournalEntry
from sagacity.errors import SelfApprovalError
from sagacity.gate._requester import request_entry, requesters

log = logging.getLogger("sagacity.approvals")


def refuse_own_request(
    principal: Principal, saga_id: str, entries: Sequence[JournalEntry], seq: int
) -> None:
    """Refuse ``principal``'s decision on the request at ``seq`` if it made the request.

    ``principal`` made it when one of its identities (its name, the agents bound to it in the
    principals file) is the request's ``caller``, actor or writer on the chain.  A seq that is
    no request is left to the core's own refusal.

    Raises:
        SelfApprovalError: the request is ``principal``'s own (or one of its agents').
    """
    entry = request_entry(entries, seq)
    if entry is not None:
        _refuse_own(principal, saga_id, entry, "decide the request")


def refuse_own_step(principal: Principal, saga_id: str, step: JournalEntry) -> None:
    """Refuse ``principal``'s settlement of the suspect step whose entry is ``step`` (the
    call's ``INTENT``, or the undone step's outcome) if it made the call: whoever ran a step
    does not say whether it took effect.

    Raises:
        SelfApprovalError: the step is ``principal``'s own (or one of its agents').
    """
    _refuse_own(principal, saga_id, step, "settle the step")


def _refuse_own(principal: Principal, saga_id: str, entry: JournalEntry, act: str) -> None:
    shared = sorted(principal.identities & requesters(entry))
    if not shared:
        return
    whose = "its own" if principal.name in shared else "made by its agent"
    seq = entry.seq
    log.warning(
        "refused: %s to %s at %s/%s, %s (%s)",
        principal.name,
        act,
        saga_id,
        seq,
        whose,
        ", ".join(shared),
    )
    noun = "request" if act.endswith("request") else "step"
    raise SelfApprovalError(
        f"{principal.name} may not {act} at {saga_id}/{seq}: it is {whose} "
        f"({', '.join(shared)}); nobody decides their own {noun}, another approver must",
        saga_id=saga_id,
        seq=seq,
    )
