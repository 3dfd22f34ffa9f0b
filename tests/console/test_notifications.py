"""Webhook notifications against local HTTP receivers: one that answers, one that fails at
first, one that hangs and one that refuses connections; none of them delays a decision."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sagacity.consumers.approvals.console._notify import Delivery
from tests.approvals.conftest import TOKENS, LiveService, auth_file, bearer, shown
from tests.compensation.conftest import free_port

pytestmark = pytest.mark.postgres
_ = auth_file  # the fixture, shared with the approvals tests


class Receiver:
    """A local webhook: records every body; fails the first ``failures`` posts with 500."""

    def __init__(self, failures: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.attempts = 0
        self.failures = failures
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                owner.attempts += 1
                if owner.attempts <= owner.failures:
                    self.send_response(500)
                    self.end_headers()
                    return
                owner.bodies.append(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Hanging:
    """Accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def receivers() -> Iterator[dict[str, Any]]:
    made = {"good": Receiver(), "flaky": Receiver(failures=2), "hanging": Hanging()}
    yield made
    for receiver in made.values():
        receiver.close()


def wait_for(check: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_new_expiring_and_attention_notices_reach_every_webhook_without_delaying_decisions(
    pg_dsn: str, auth_file: Path, receivers: dict[str, Any]
) -> None:
    refusing = f"http://127.0.0.1:{free_port()}/hook"
    urls = (receivers["good"].url, receivers["flaky"].url, receivers["hanging"].url, refusing)
    with LiveService(
        pg_dsn,
        auth_file,
        notify=urls,
        notify_interval_s=0.1,
        notify_before_expiry_s=3600.0,
        approval_ttl_s=600.0,
        public_url="https://approvals.example.com",
    ) as live:
        notifier = live.server.notifier
        assert notifier is not None
        notifier._delivery = Delivery(timeout_s=1.0, attempts=4, backoff_s=0.1)
        seq = live.gate("notify-1")
        good = receivers["good"]
        wait_for(lambda: len(good.bodies) >= 2)
        by_kind = {b["event"]: b for b in good.bodies}
        new = by_kind["request.new"]
        assert (new["saga_id"], new["seq"], new["tool"]) == ("notify-1", seq, "send_wire_transfer")
        assert new["link"] == f"https://approvals.example.com/ui/requests/notify-1/{seq}"
        assert by_kind["request.expiring"]["deadline_us"] > 0
        # A decision is not held up by the hanging or refusing endpoints.
        started = time.monotonic()
        answer = httpx.post(
            f"{live.url}/sagacity/approve/notify-1/{seq}",
            json=shown(live.url, "notify-1", seq),
            headers=bearer("bob"),
        )
        assert answer.status_code == 200
        # Waiting for the hanging endpoint alone would take its four attempts of 1 s each.
        assert time.monotonic() - started < 4.0
        # The flaky endpoint got both notices after its failures (retried with backoff).
        flaky = receivers["flaky"]
        wait_for(lambda: len(flaky.bodies) >= 2)
        assert flaky.attempts >= 4
        # A saga entering the attention queue is announced once, with a link to its page.
        suspect = live.suspect("notify-2")
        live.server.service.materialise("notify-2")
        wait_for(lambda: any(b["event"] == "saga.attention" for b in good.bodies))
        attention = [b for b in good.bodies if b["event"] == "saga.attention"]
        assert attention[0]["link"] == "https://approvals.example.com/ui/sagas/notify-2"
        assert f"seq {suspect}" in attention[0]["text"]
        time.sleep(0.5)
        assert len([b for b in good.bodies if b["event"] == "saga.attention"]) == 1
        kinds = sorted(b["event"] for b in good.bodies)
        assert kinds == ["request.expiring", "request.new", "saga.attention"]
        # The hanging and refusing endpoints are given up on after their attempts.
        wait_for(lambda: notifier.failed >= 4, timeout=20)
        assert all(token not in json.dumps(good.bodies) for token in TOKENS.values())


def test_slack_format_escapes_the_text_and_links_the_console(pg_dsn: str, auth_file: Path) -> None:
    good = Receiver()
    try:
        with LiveService(
            pg_dsn,
            auth_file,
            notify=(good.url,),
            notify_format="slack",
            notify_interval_s=0.1,
            public_url="https://c.example.com",
        ) as live:
            seq = live.gate("slack-1")
            body = wait_for(lambda: good.bodies and good.bodies[0])
            assert set(body) == {"text"}
            assert body["text"].startswith("Approval needed: send_wire_transfer (IRREVERSIBLE)")
            assert body["text"].endswith(
                f"<https://c.example.com/ui/requests/slack-1/{seq}|open in the console>"
            )
    finally:
        good.close()


def test_slack_text_cannot_forge_a_link() -> None:
    from sagacity.consumers.approvals.console._notify import Notice

    notice = Notice(
        kind="request.new",
        saga_id="s",
        seq=1,
        text="tool <https://evil.example|click> & co",
        link="https://c.example.com/ui/requests/s/1",
    )
    text = notice.body("slack")["text"]
    assert "&lt;https://evil.example|click&gt; &amp; co" in text
