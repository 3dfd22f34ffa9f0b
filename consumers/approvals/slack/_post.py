"""Posting new requests to Slack and rewriting the messages of requests decided elsewhere.

A watcher thread looks at the working table every few seconds.  Each pending request is
claimed once in the shared Slack tables (:meth:`SlackStore.claim`: replicas and restarts do not
post it twice), then posted; a post that fails gives its claim back, to be tried on a later look.  A
message whose request has since been decided (in the console, the API, the CLI, another click)
or has expired is rewritten with the outcome, without its buttons.  Nothing here runs on a
decision's path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sagacity.consumers.approvals.slack._blocks import request_message
from sagacity.consumers.approvals.slack._decide import SlackDecisions
from sagacity.consumers.approvals.slack._store import SlackStore
from sagacity.consumers.approvals.slack._web import SlackCallError, SlackWeb
from sagacity.errors import SagacityError
from sagacity.ports import RequestStore, RowState

log = logging.getLogger("sagacity.approvals.slack")


class SlackPoster:
    """Watches the working table and keeps the channel's messages current.

    Args:
        requests: the service's working table.
        store: the Slack tables.
        web: the bot's Web API client.
        decisions: rewrites a message from its request's row.
        channel: where requests are posted.
        public_url: the console's address, for the messages' links.
        now_us: the service's clock.
        interval_s: how often the table is looked at.
    """

    def __init__(
        self,
        requests: RequestStore,
        *,
        store: SlackStore,
        web: SlackWeb,
        decisions: SlackDecisions,
        channel: str,
        public_url: str,
        now_us: Callable[[], int],
        interval_s: float = 2.0,
    ) -> None:
        self._requests = requests
        self._store = store
        self._web = web
        self._decisions = decisions
        self.channel = channel
        self._public_url = public_url
        self._now_us = now_us
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.posted = 0
        self.failed = 0

    def start(self) -> None:
        """Start watching (in a daemon thread)."""
        self._thread = threading.Thread(target=self._run, name="sagacity-slack-post")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, *, wait_s: float = 5.0) -> None:
        """Stop watching."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except SagacityError as exc:
                log.warning("slack: could not look for requests to post: %s", exc)
            self._stop.wait(self._interval)

    def scan(self) -> None:
        """Post every pending request not posted yet; rewrite the messages of closed ones."""
        for row in self._requests.requests(states=(RowState.PENDING.value,)):
            if self._stop.is_set():
                return
            if not self._store.claim(row.saga_id, row.seq, now_us=self._now_us()):
                continue
            try:
                channel, ts = self._web.post(
                    self.channel, request_message(row, public_url=self._public_url)
                )
            except SlackCallError as exc:
                self.failed += 1
                self._store.release(row.saga_id, row.seq)
                log.warning("slack: could not post %s/%s: %s", row.saga_id, row.seq, exc)
                continue
            self._store.posted(row.saga_id, row.seq, channel=channel, ts=ts)
            self.posted += 1
            log.info("slack: posted %s/%s to %s", row.saga_id, row.seq, channel)
        for message in self._store.unsettled():
            current = self._requests.get(message.saga_id, message.seq)
            if current is not None and current.state is not RowState.PENDING:
                self._decisions.refresh(message.saga_id, message.seq)
