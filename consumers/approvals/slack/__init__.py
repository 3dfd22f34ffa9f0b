"""Deciding in Slack: requests posted with their payload and hashes, Approve and Reject buttons,
and signed clicks decided through the approvals service's own decision path.

See docs/operations/slack.md.  :class:`SlackIntegration` assembles the parts for one replica:
the configuration (:mod:`._config`), the bot's Web API calls (:mod:`._web`), the messages
(:mod:`._blocks`), the Slack tables (:mod:`._store`), the signature gate (:mod:`._signature`),
the click's reading (:mod:`._click`) and deciding (:mod:`._decide`), and the watcher that posts
(:mod:`._post`).  Its :attr:`~SlackIntegration.app` is mounted at ``/slack``; Slack's
interactivity request URL is ``{public URL}/slack/interactivity``.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sagacity.consumers.approvals._auth import AuthFile
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals.slack._click import Click, parse_click
from sagacity.consumers.approvals.slack._config import SlackConfig, slack_config
from sagacity.consumers.approvals.slack._decide import SlackDecisions
from sagacity.consumers.approvals.slack._post import SlackPoster
from sagacity.consumers.approvals.slack._signature import WINDOW_S, SlackSignature
from sagacity.consumers.approvals.slack._store import SlackStore
from sagacity.consumers.approvals.slack._web import SlackWeb
from sagacity.errors import AuthenticationError, InvalidArgumentError
from sagacity.ports import RequestStore

__all__ = [
    "WINDOW_S",
    "Click",
    "SlackConfig",
    "SlackIntegration",
    "slack_config",
]

log = logging.getLogger("sagacity.approvals.slack")

INTERACTIVITY_PATH = "/interactivity"


class SlackIntegration:
    """Slack for one replica of the approvals service.

    Args:
        config: the secrets, channel and Web API URL.
        service: the service's decision path.
        requests: the service's request store.
        tables: where the Slack messages and the seen signatures are kept (every replica
            shares them).
        auth: the principals file.
        public_url: the console's address as people reach it.
        interval_s: how often new requests are looked for.
    """

    def __init__(
        self,
        config: SlackConfig,
        *,
        service: ApprovalService,
        requests: RequestStore,
        tables: SlackStore,
        auth: AuthFile,
        public_url: str,
        interval_s: float = 2.0,
    ) -> None:
        now_us = service.sagacity.now_us
        self.store = tables
        self.web = SlackWeb(config.bot_token, base_url=config.api_url)
        self.signature = SlackSignature(config.signing_secret, store=self.store, now_us=now_us)
        self.decisions = SlackDecisions(
            service, auth=auth, web=self.web, store=self.store, public_url=public_url
        )
        self.poster = SlackPoster(
            requests,
            store=self.store,
            web=self.web,
            decisions=self.decisions,
            channel=config.channel,
            public_url=public_url,
            now_us=now_us,
            interval_s=interval_s,
        )
        self.app = Starlette(
            routes=[Route(INTERACTIVITY_PATH, self._interactivity, methods=["POST"])]
        )
        self.decided = 0
        """Clicks that decided a request."""
        self.refused = 0
        """Clicks the decision path refused (unmapped user, scope, route, own request, a
        changed request, a closed one): each told to the clicker."""
        self.unauthenticated = 0
        """Requests to the interactivity endpoint refused before their body was read (a bad
        or missing signature, too old, seen before) or whose body did not parse."""

    def start(self) -> None:
        """Create the Slack tables and start posting."""
        self.store.migrate()
        self.poster.start()

    def stop(self) -> None:
        """Stop posting."""
        self.poster.stop()

    def health(self) -> dict[str, int]:
        """This replica's Slack counts since it started, for ``/healthz``."""
        return {
            "posted": self.poster.posted,
            "post_failures": self.poster.failed,
            "decided": self.decided,
            "refused": self.refused,
            "unauthenticated": self.unauthenticated,
        }

    async def _interactivity(self, request: Request) -> Response:
        body = await request.body()
        headers = request.headers
        try:
            # Nothing of the body is read before Slack's signature, its age and its novelty.
            await run_in_threadpool(
                self.signature.check,
                body,
                headers.get("x-slack-request-timestamp"),
                headers.get("x-slack-signature"),
            )
        except AuthenticationError as exc:
            self.unauthenticated += 1
            log.warning("slack: interactivity request refused: %s", exc)
            return JSONResponse({"detail": str(exc)}, status_code=401)
        try:
            click = parse_click(body)
        except InvalidArgumentError as exc:
            self.unauthenticated += 1
            log.warning("slack: interactivity body refused: %s", exc)
            return JSONResponse({"detail": str(exc)}, status_code=400)
        if click is not None:
            refusal = await run_in_threadpool(self.decisions.handle, click)
            if refusal is None:
                self.decided += 1
            else:
                self.refused += 1
        # Slack wants 200 within three seconds; what the clicker is told goes by the Web API.
        return Response(status_code=200)
