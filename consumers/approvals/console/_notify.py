"""Webhook notifications: new requests, requests about to expire, sagas that need a person.

A watcher thread looks at the working tables every few seconds and claims each notice once in
the table it is handed (:class:`~sagacity.ports.NoticeClaims`: PostgreSQL's
``sagacity_console_notice`` in the service, so replicas and restarts do not repeat it); a small
pool delivers it to every ``--notify`` URL, each attempt bounded by a timeout and retried with
exponential backoff.  Nothing here runs on a decision's path: a hanging or refusing endpoint
delays only its own notices, never an approval.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import httpx

from sagacity.consumers.approvals._deadline import row_deadline_us
from sagacity.consumers.approvals._routing import Routing, age_us
from sagacity.errors import SagacityError
from sagacity.ports import OPEN_STATES, NoticeClaims, RequestRow, RequestStore
from sagacity.saga._saga import Sagacity

log = logging.getLogger("sagacity.console.notify")

NEW_REQUEST = "request.new"
EXPIRING = "request.expiring"
ESCALATED = "request.escalated"
"""A routed request reached a later tier (docs/operations/routing.md); claimed per tier."""
ATTENTION = "saga.attention"
FORMATS = ("json", "slack")


@dataclass(frozen=True, kw_only=True)
class Notice:
    """One thing to tell people."""

    kind: str
    saga_id: str
    seq: int
    text: str
    link: str
    tool: str | None = None
    detail: dict[str, Any] | None = None
    urls: tuple[str, ...] = ()
    """Where this notice goes (a route tier's ``notify``); empty: every ``--notify`` URL."""
    claim: str | None = None
    """The kind it is claimed under, when one kind is sent more than once (a tier)."""

    def body(self, fmt: str) -> dict[str, Any]:
        """The webhook body: Slack's incoming-webhook ``text`` or plain JSON."""
        if fmt == "slack":
            return {"text": f"{_slack_escape(self.text)} <{self.link}|open in the console>"}
        return {
            "event": self.kind,
            "saga_id": self.saga_id,
            "seq": self.seq,
            "tool": self.tool,
            "text": self.text,
            "link": self.link,
            **(self.detail or {}),
        }


def _routed(
    notices: list[Notice], rows: Sequence[RequestRow], routing: Routing, now_us: int
) -> list[Notice]:
    """``notices`` addressed as the routes say: each request's to its first tier (its
    ``notify`` URLs, who it names), and one ``request.escalated`` per later tier reached, to
    that tier (docs/operations/routing.md)."""
    by_key = {(r.saga_id, r.seq): r for r in rows}
    out: list[Notice] = []
    for notice in notices:
        row = by_key.get((notice.saga_id, notice.seq))
        route = routing.route(row.tool) if row is not None else None
        if row is None or route is None:
            out.append(notice)
            continue
        first = route.tiers[0]
        names = first.names()
        out.append(
            replace(
                notice,
                text=f"{notice.text} (for {', '.join(names)})",
                urls=first.notify,
                detail={**(notice.detail or {}), "routed_to": names},
            )
        )
        if notice.kind != NEW_REQUEST or row.seen_at_us is None:
            continue
        reached = route.reached(age_us(now_us, row))
        for index, tier in enumerate(route.tiers[1 : reached + 1], start=1):
            out.append(
                Notice(
                    kind=ESCALATED,
                    claim=f"{ESCALATED}.{index}",
                    saga_id=row.saga_id,
                    seq=row.seq,
                    tool=row.tool,
                    link=notice.link,
                    text=f"Escalated to {', '.join(tier.names())}: approval needed for "
                    f"{row.tool} in saga {row.saga_id}",
                    urls=tier.notify,
                    detail={"routed_to": tier.names(), "tier": index},
                )
            )
    return out


def _slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters, so a model-written tool name cannot forge a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """How notices are delivered.

    Attributes:
        timeout_s: the longest one attempt may take (connect and read).
        attempts: tries per URL before giving up.
        backoff_s: the first wait between tries; doubled each time.
    """

    timeout_s: float = 5.0
    attempts: int = 4
    backoff_s: float = 0.5


class Notifier:
    """Watches for notices and delivers them to webhooks.

    Args:
        store: the approvals service's working tables (the requests and the sagas that need
            a person).
        claims: where each notice is claimed once before it is sent.
        sagacity: the core (for each request's deadline).
        urls: the webhooks.
        fmt: ``json`` or ``slack``.
        public_url: the console's base address, for links (``http://host:port``).
        before_expiry_s: how long before a request's deadline its warning goes out.
        interval_s: how often the tables are looked at.
        routing: the principals file's routes (:mod:`.._routing`): a routed request's notices
            name who it goes to, go to its tier's ``notify`` URLs when it has some, and an
            escalation is told to the tier it reaches.
        delivery: timeouts and retries.
        post: sends one body (tests may pass their own); default an ``httpx`` POST.
    """

    def __init__(
        self,
        store: RequestStore,
        sagacity: Sagacity,
        *,
        claims: NoticeClaims,
        urls: Sequence[str],
        fmt: str = "json",
        public_url: str,
        before_expiry_s: float = 900.0,
        interval_s: float = 2.0,
        delivery: Delivery | None = None,
        post: Callable[[str, dict[str, Any], float], int] | None = None,
        routing: Callable[[], Routing] | None = None,
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"notify format must be one of {FORMATS}, got {fmt!r}")
        self._store = store
        self._claims = claims
        self._sagacity = sagacity
        self.urls = tuple(urls)
        self.fmt = fmt
        self._base = public_url.rstrip("/")
        self._before_us = int(before_expiry_s * 1_000_000)
        self._interval = interval_s
        self._delivery = delivery or Delivery()
        self._post = post or _http_post
        self._routing = routing
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="sagacity-notify"
        )
        self.delivered = 0
        self.failed = 0
        self._counts = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------
    def migrate(self) -> None:
        """Create the notice table if it does not exist."""
        self._claims.migrate()

    def start(self) -> None:
        """Start watching (in a daemon thread)."""
        self.migrate()
        self._thread = threading.Thread(target=self._run, name="sagacity-notify-watch")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, *, wait_s: float = 5.0) -> None:
        """Stop watching; deliveries still retrying are abandoned (the pool is not joined)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except SagacityError as exc:
                log.warning("notifications: could not look for notices: %s", exc)
            self._stop.wait(self._interval)

    # -- finding notices ---------------------------------------------------------------------
    def _link(self, *parts: str) -> str:
        return self._base + "/ui/" + "/".join(quote(p, safe="") for p in parts)

    def _deadline(self, row: RequestRow) -> int | None:
        return row_deadline_us(self._sagacity, row)

    def candidates(self) -> list[Notice]:
        """Every notice the tables call for now (claimed or not)."""
        now = self._sagacity.now_us()
        notices: list[Notice] = []
        rows = self._store.requests(states=OPEN_STATES)
        for row in rows:
            link = self._link("requests", row.saga_id, str(row.seq))
            signatures = f"{len(row.signed_by)} of {row.signatures_required} signatures"
            notices.append(
                Notice(
                    kind=NEW_REQUEST,
                    saga_id=row.saga_id,
                    seq=row.seq,
                    tool=row.tool,
                    link=link,
                    text=f"Approval needed: {row.tool} ({row.reversibility}) in saga "
                    f"{row.saga_id}, {signatures}",
                    detail={"reversibility": row.reversibility},
                )
            )
            deadline = self._deadline(row)
            if deadline is not None and now < deadline <= now + self._before_us:
                minutes = max(0, (deadline - now) // 60_000_000)
                notices.append(
                    Notice(
                        kind=EXPIRING,
                        saga_id=row.saga_id,
                        seq=row.seq,
                        tool=row.tool,
                        link=link,
                        text=f"Expires in {minutes} min: {row.tool} in saga {row.saga_id} "
                        f"({signatures})",
                        detail={"deadline_us": deadline},
                    )
                )
        if self._routing is not None:
            notices = _routed(notices, rows, self._routing(), now)
        for saga in self._store.attention():
            notices.append(
                Notice(
                    kind=ATTENTION,
                    saga_id=saga.saga_id,
                    seq=saga.ended_seq,
                    link=self._link("sagas", saga.saga_id),
                    text=f"Saga {saga.saga_id} needs a person ({saga.status}): {saga.detail}",
                    detail={"status": saga.status},
                )
            )
        return notices

    def _claim(self, notice: Notice) -> bool:
        return self._claims.claim(
            notice.claim or notice.kind, notice.saga_id, notice.seq, now_us=self._sagacity.now_us()
        )

    def scan(self) -> list[Notice]:
        """Claim and send every notice not sent before; returns those claimed."""
        if not self.urls:
            return []
        sent = []
        for notice in self.candidates():
            if self._claim(notice):
                sent.append(notice)
                for url in notice.urls or self.urls:
                    self._pool.submit(self._deliver, url, notice)
        return sent

    # -- delivering -------------------------------------------------------------------------
    def _deliver(self, url: str, notice: Notice) -> None:
        body = notice.body(self.fmt)
        wait = self._delivery.backoff_s
        for attempt in range(1, self._delivery.attempts + 1):
            if self._stop.is_set():
                return
            problem: str
            try:
                status = self._post(url, body, self._delivery.timeout_s)
            except Exception as exc:  # any transport failure is retried, never raised
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    with self._counts:
                        self.delivered += 1
                    return
                problem = f"HTTP {status}"
            log.info(
                "notification %s for %s/%s to %s failed (attempt %d): %s",
                notice.kind,
                notice.saga_id,
                notice.seq,
                _redact(url),
                attempt,
                problem,
            )
            if attempt < self._delivery.attempts and self._stop.wait(wait):
                return
            wait *= 2
        with self._counts:
            self.failed += 1
        log.warning(
            "notification %s for %s/%s to %s given up after %d attempts",
            notice.kind,
            notice.saga_id,
            notice.seq,
            _redact(url),
            self._delivery.attempts,
        )


def _redact(url: str) -> str:
    """A webhook URL without its path (Slack's path is the secret)."""
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.host}{':' + str(parsed.port) if parsed.port else ''}/…"


def _http_post(url: str, body: dict[str, Any], timeout_s: float) -> int:
    response = httpx.post(
        url,
        content=json.dumps(body).encode("utf-8"),
        headers={"content-type": "application/json", "user-agent": "sagacity-notify"},
        timeout=httpx.Timeout(timeout_s),
    )
    return response.status_code
