"""A click, decided: the clicker's principal, the service's own decision path, the message.

The clicker is the principal whose ``slack_user`` is the Slack user id of the signed body
(:meth:`AuthFile.by_slack_user`, the file as it stands now); nobody else's name is taken from
the body.  Approve calls :meth:`ApprovalService.approve` with the request hash the button
carried — the console's form calls the same with the hash its page showed — so the scope,
role, self-approval, binding, expiry and signing rules are the service's, applied once.  Reject
calls :meth:`ApprovalService.reject`, as the console's form does.

A refusal is told to the clicker alone (``chat.postEphemeral``) with the service's sentence.
After any click the message is rewritten from the request's row (``chat.update``): with its
outcome and who decided, without buttons, once it is decided; with its signatures so far while
it waits for more.  A stale message clicked again gets the service's refusal (already decided)
and is rewritten too.
"""

from __future__ import annotations

import logging

from sagacity.consumers.approvals._auth import AuthFile
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals.slack._blocks import outcome_message
from sagacity.consumers.approvals.slack._click import Click
from sagacity.consumers.approvals.slack._store import SlackStore
from sagacity.consumers.approvals.slack._web import SlackCallError, SlackWeb
from sagacity.errors import ConfigurationError, SagacityError
from sagacity.ports import RowState

log = logging.getLogger("sagacity.approvals.slack")

REJECTED_IN_SLACK = "rejected in Slack"


class SlackDecisions:
    """Decides clicks through the approvals service.

    Args:
        service: the service's decision path.
        auth: the principals file (``slack_user`` maps a Slack user to a principal).
        web: the bot's Web API client.
        store: the Slack tables (where each request's message is).
        public_url: the console's address, for the messages' links.
    """

    def __init__(
        self,
        service: ApprovalService,
        *,
        auth: AuthFile,
        web: SlackWeb,
        store: SlackStore,
        public_url: str,
    ) -> None:
        self._service = service
        self._auth = auth
        self._web = web
        self._store = store
        self._public_url = public_url

    def handle(self, click: Click) -> str | None:
        """Decide ``click``; returns the refusal told to the clicker, ``None`` when decided."""
        refusal = self._decide(click)
        if refusal is not None:
            log.warning(
                "slack: refused %s by %s on %s/%s: %s",
                "approve" if click.approve else "reject",
                click.user,
                click.saga_id,
                click.seq,
                refusal,
            )
            self._tell(click, f"Nothing was decided on {click.saga_id}/{click.seq}: {refusal}")
        self.refresh(click.saga_id, click.seq, clicked=click)
        return refusal

    def _decide(self, click: Click) -> str | None:
        try:
            principal = self._auth.by_slack_user(click.user)
        except ConfigurationError as exc:
            return str(exc)
        if principal is None:
            return (
                f"your Slack user {click.user} is not mapped to a principal of the approvals "
                f'service; an operator adds slack_user = "{click.user}" to your entry in the '
                "principals file"
            )
        try:
            if click.approve:
                self._service.approve(
                    principal, click.saga_id, click.seq, request_hash=click.request_hash
                )
            else:
                self._service.reject(principal, click.saga_id, click.seq, reason=REJECTED_IN_SLACK)
        except SagacityError as exc:
            return str(exc)
        log.info(
            "slack: %s %s %s/%s",
            principal.name,
            "approved" if click.approve else "rejected",
            click.saga_id,
            click.seq,
        )
        return None

    def refresh(self, saga_id: str, seq: int, *, clicked: Click | None = None) -> bool:
        """Rewrite the request's message from its row; ``True`` once it shows the outcome.

        The message is the one this service posted (its own record), else the one clicked.
        """
        row = self._service.store.get(saga_id, seq)
        if row is None:
            return False
        posted = self._store.message(saga_id, seq)
        if posted is not None:
            where: tuple[str, str] | None = (posted.channel, posted.ts)
        elif clicked is not None and clicked.channel and clicked.message_ts:
            where = (clicked.channel, clicked.message_ts)
        else:
            where = None
        if where is None:
            return False
        try:
            self._web.update(*where, outcome_message(row, public_url=self._public_url))
        except SlackCallError as exc:
            log.warning("slack: could not rewrite the message of %s/%s: %s", saga_id, seq, exc)
            return False
        settled = row.state is not RowState.PENDING
        if settled:
            self._store.settle(saga_id, seq)
        return settled

    def _tell(self, click: Click, text: str) -> None:
        if click.channel is None:
            return
        try:
            self._web.ephemeral(click.channel, click.user, text)
        except SlackCallError as exc:
            log.warning("slack: could not tell %s: %s", click.user, exc)
