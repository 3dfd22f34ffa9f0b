"""The Slack world: the approvals service on real Kafka and PostgreSQL, posting to a loopback
Slack Web API, an agent on a sealed journal, and the principals mapped to Slack users."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sagacity import (
    EventType,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compose,
)
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.keys import KEK_SETTING, KeyRing, KeyService, write_key_encryption_key
from sagacity.postgres import PostgresKeyStore
from sagacity.producer import KafkaJournal
from tests.approvals.conftest import entry_text
from tests.compensation.conftest import free_port
from tests.console.conftest import quietly, serving, topic_and_schema
from tests.slack.loopback import SlackApi, about, click_body, signed_headers

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
SLACK_USERS = {"alice": "U0ALICE", "bob": "U0BOB", "carol": "U0CAROL"}
TOOLS = {"alice": ["*"], "bob": ["*"], "carol": ["charge"], "dave": ["*"]}
"""carol decides only ``charge``; dave has no Slack user (until a test maps one)."""
ACCOUNT = "DE89370400440532013000"


class Till:
    """A payment that cannot be undone; its account number is never journaled in clear."""

    def __init__(self) -> None:
        self.paid: list[tuple[str, str, int]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["account"])
    def pay(self, order: str, account: str, amount: int) -> str:
        self.paid.append((order, account, amount))
        return f"paid {amount} for {order}"

    @compensable(reversibility=Reversibility.PRIVILEGED)
    def grant(self, order: str, role: str) -> str:
        return f"granted {role} for {order}"


def auth_text(late: str | None = None) -> str:
    """The principals file: alice, bob and carol in Slack; dave too when ``late`` names him."""
    entries = []
    for name, tools in TOOLS.items():
        text = entry_text(
            f"{name}@example.com", f"tok-{name}-slack-0123456789", tools, role="approver"
        )
        user = SLACK_USERS.get(name) or (late if name == "dave" else None)
        if user is not None:
            text += f'slack_user = "{user}"\n'
        entries.append(text)
    return "\n".join(entries)


@dataclass
class World:
    """Everything a Slack test drives."""

    url: str
    server: ApprovalsServer
    agent: Sagacity
    till: Till
    slack: SlackApi
    auth: Path

    def gate(self, saga: str, amount: int = 120) -> int:
        """A payment gated for approval; returns the request's seq."""
        pay = self.agent.registry.get("pay")
        assert pay is not None
        result = self.agent.saga(saga, lambda: pay.wrapped(saga, ACCOUNT, amount))
        assert result.status is SagaStatus.AWAITING_APPROVAL, result
        assert result.awaiting_seq is not None
        return result.awaiting_seq

    def gate_grant(self, saga: str) -> int:
        """A privileged grant gated for two approvers; returns the request's seq."""
        grant = self.agent.registry.get("grant")
        assert grant is not None
        result = self.agent.saga(saga, lambda: grant.wrapped(saga, "admin"))
        assert result.status is SagaStatus.AWAITING_APPROVAL, result
        assert result.awaiting_seq is not None
        return result.awaiting_seq

    def posted(self, saga: str) -> dict[str, Any]:
        """The message the bot posted for ``saga``'s request (waiting for it)."""
        return self.slack.wait("chat.postMessage", about(saga)).body

    def click(
        self,
        user: str,
        action: str,
        value: str,
        *,
        secret: str = SECRET,
        at: int | None = None,
        body: bytes | None = None,
    ) -> httpx.Response:
        """Post a button press to the interactivity endpoint, signed as Slack signs it."""
        sent = body if body is not None else click_body(user, action, value)
        return httpx.post(
            f"{self.url}/slack/interactivity",
            content=sent,
            headers=signed_headers(secret, sent, at=at),
            timeout=30,
        )

    def entries(self, saga: str) -> list[JournalEntry]:
        return list(self.agent.entries(saga))

    def of(self, saga: str, kind: EventType) -> list[JournalEntry]:
        return [e for e in self.entries(saga) if e.event_type is kind]

    def told(self, user: str, saga: str) -> str:
        """What the bot told ``user`` alone about ``saga`` (waiting for it)."""
        call = self.slack.wait(
            "chat.postEphemeral",
            lambda c: c.body.get("user") == user and saga in c.body.get("text", ""),
        )
        return str(call.body["text"])

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


def button(message: dict[str, Any], action: str) -> dict[str, Any] | None:
    """The button ``action`` of a posted message, if it has one."""
    for block in message["blocks"]:
        for element in block.get("elements", []) if block["type"] == "actions" else []:
            if element.get("action_id") == action:
                return dict(element)
    return None


def shown_value(message: dict[str, Any]) -> dict[str, Any]:
    """The request the message's Approve button names."""
    found = button(message, "sagacity_approve")
    assert found is not None, message
    return dict(json.loads(found["value"]))


@pytest.fixture(scope="module")
def world(
    kafka_bootstrap: str, postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    from sagacity.signing._decision_signature import generate_key

    tmp = tmp_path_factory.mktemp("slack")
    kek = tmp / "journal.kek"
    write_key_encryption_key(kek)
    auth = tmp / "auth.toml"
    auth.write_text(auth_text(), encoding="utf-8")
    (tmp / "signing.secret").write_text(SECRET + "\n", encoding="utf-8")
    (tmp / "bot.token").write_text(BOT_TOKEN + "\n", encoding="utf-8")
    approvals_key = generate_key(tmp / "approvals.pem")
    with contextlib.ExitStack() as stack:
        slack = SlackApi()
        stack.callback(slack.close)
        topic, dsn = stack.enter_context(topic_and_schema(kafka_bootstrap, postgres_dsn, "slack"))
        environment = stack.enter_context(pytest.MonkeyPatch.context())
        environment.setenv(KEK_SETTING, str(kek))
        environment.setenv("SAGACITY_DATABASE_URL", dsn)
        settings = ApprovalsSettings(
            database_url=dsn,
            bootstrap_servers=kafka_bootstrap,
            topic=topic,
            group_id=f"approvals-{uuid.uuid4().hex[:8]}",
            auth_file=str(auth),
            port=free_port(),
            sweep_interval_s=0.5,
            signing_key=str(tmp / "approvals.pem"),
            slack_signing_secret_file=str(tmp / "signing.secret"),
            slack_bot_token_file=str(tmp / "bot.token"),
            slack_channel="C0APPROVALS",
            slack_api_url=slack.url,
        )
        server = ApprovalsServer(
            settings, dependencies=compose.approvals_of(settings), tools=[Till()]
        )
        url = stack.enter_context(serving(server))
        keys = KeyService(PostgresKeyStore(dsn), KeyRing.from_setting(str(kek)))
        stack.callback(quietly, keys.close)
        journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
        stack.callback(quietly, journal.close)
        agent = Sagacity(
            journal,
            compensation="delegated",
            writer_id="agent-7",
            approvals_public_key=approvals_key.public_hex,
        )
        till = Till()
        agent.wrap(till)
        yield World(url=url, server=server, agent=agent, till=till, slack=slack, auth=auth)
