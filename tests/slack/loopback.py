"""A loopback Slack: a Web API that records the bot's calls, and clicks signed as Slack signs.

:class:`SlackApi` answers ``chat.postMessage``, ``chat.update`` and ``chat.postEphemeral`` as
Slack does (``{"ok": true, ...}``) and keeps every call: its method, its ``Authorization``
header and its JSON body.  :func:`signed_click` builds an interactivity body as Slack posts it
(``payload=<JSON>``, form-encoded) and signs it with the algorithm Slack documents, written
out here on its own (``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``), not through the
SDK the service uses.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

CHANNEL = "C0APPROVALS"


@dataclass(frozen=True)
class Call:
    """One Web API call the bot made."""

    method: str
    authorization: str
    body: dict[str, Any]


class SlackApi:
    """The Web API on a loopback port; :attr:`url` is its base URL."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._ts = itertools.count(1)
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else {}
                method = self.path.rsplit("/", 1)[-1]
                answer: dict[str, Any] = {"ok": True}
                with owner._lock:
                    owner.calls.append(Call(method, self.headers.get("authorization", ""), body))
                    if method == "chat.postMessage":
                        answer.update(channel=CHANNEL, ts=f"1700000000.{next(owner._ts):06d}")
                    elif method == "chat.update":
                        answer.update(channel=body.get("channel"), ts=body.get("ts"))
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, method: str, where: Callable[[Call], bool] = lambda c: True) -> list[Call]:
        """The calls of ``method`` that ``where`` accepts, in order."""
        with self._lock:
            return [c for c in self.calls if c.method == method and where(c)]

    def wait(self, method: str, where: Callable[[Call], bool], timeout: float = 20) -> Call:
        """The first call of ``method`` that ``where`` accepts, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.of(method, where)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"the bot made no {method} call as expected: {self.calls}")
            time.sleep(0.05)


def about(saga_id: str) -> Callable[[Call], bool]:
    """Whether a call's message is about ``saga_id``."""
    return lambda call: saga_id in json.dumps(call.body)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Slack's request signature of ``body`` sent at ``timestamp``."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def click_body(
    user: str, action: str, value: str, *, channel: str = CHANNEL, ts: str = "1700000000.000001"
) -> bytes:
    """An interactivity body as Slack posts it for a button press."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0TEAM"},
        "team": {"id": "T0TEAM"},
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "channel": {"id": channel},
        "actions": [
            {
                "type": "button",
                "action_id": action,
                "block_id": "sagacity_decision",
                "value": value,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(secret: str, body: bytes, *, at: int | None = None) -> dict[str, str]:
    """The headers Slack sends with ``body``, signed at ``at`` (default now)."""
    stamp = int(time.time()) if at is None else at
    return {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": str(stamp),
        "x-slack-signature": sign(secret, stamp, body),
    }
