"""Fixtures of the approvals service tests: principals, tokens and an auth file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

TOKENS = {
    "alice": "tok-alice-0123456789abcdef",
    "bob": "tok-bob-0123456789abcdef",
    "carol": "tok-carol-0123456789abcdef",
    "eve": "tok-eve-0123456789abcdef",
    "dave": "tok-dave-0123456789abcdef",
    "audit": "tok-audit-0123456789abcdef",
    "agent": "tok-agent-0123456789abcdef",
    "agent2": "tok-agent2-0123456789abcdef",
    "scoped": "tok-scoped-0123456789abcdef",
}
TOOLS: dict[str, list[str]] = {
    "alice": ["send_wire_transfer", "grant_agent_access"],
    "bob": ["*"],
    "carol": ["grant_agent_access"],
    "eve": ["reserve_inventory"],
    "dave": ["*"],  # an approver of every tool, bound to the agent that acts for him
    "audit": [],
    "agent": ["*"],
    "agent2": ["*"],
    "scoped": ["reserve_inventory", "lookup_stock"],
}
ROLES = {"audit": "auditor", "agent": "agent", "agent2": "agent", "scoped": "agent"}
"""Principals that are not approvers (every other one is)."""
AGENTS = {"dave": ["agent@example.com"]}
"""An approver's own agents: dave decides none of agent@example.com's requests."""
ALICE = '{"amount":"100","to":"alice"}'
MALLORY = '{"amount":"999999","to":"mallory"}'


def bearer(name: str) -> dict[str, str]:
    """The Authorization header of ``name``'s token."""
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def shown(url: str, saga_id: str, seq: int, who: str = "bob") -> dict[str, str]:
    """The approve body naming the request as the service shows it (its ``request_hash``); an
    empty body when the service shows no such request."""
    import httpx

    answer = httpx.get(f"{url}/sagacity/approvals/{saga_id}/{seq}", headers=bearer(who), timeout=30)
    if answer.status_code != 200:
        return {}
    return {"request_hash": answer.json()["request_hash"]}


def principal_entry(name: str) -> str:
    """The auth-file entry of test principal ``name`` (its role, tools and agents), written out
    as an operator writes it (not by :func:`auth_entry`, whose output it checks)."""
    return entry_text(
        f"{name}@example.com",
        TOKENS[name],
        TOOLS[name],
        role=ROLES.get(name, "approver"),
        agents=AGENTS.get(name, []),
    )


def entry_text(
    name: str, token: str, tools: list[str], *, role: str, agents: list[str] | None = None
) -> str:
    """A ``[[principals]]`` entry in TOML."""
    lines = [
        "[[principals]]",
        f"name = {json.dumps(name)}",
        f"role = {json.dumps(role)}",
        f"token_sha256 = {json.dumps(hashlib.sha256(token.encode()).hexdigest())}",
    ]
    if role != "auditor":
        lines.append(f"tools = {json.dumps(tools)}")
    if agents:
        lines.append(f"agents = {json.dumps(agents)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    """A TOML auth file listing every test principal's hashed token."""
    path = tmp_path / "auth.toml"
    path.write_text("\n".join(principal_entry(n) for n in TOKENS), encoding="utf-8")
    return path


class LiveService:
    """An approvals server on a real TCP port (uvicorn in a thread), with an agent beside it.

    The agent and the server share one in-memory journal; the working table is on a real
    PostgreSQL schema.  ``gate(saga_id)`` runs a saga to its approval request and folds it
    into the table, as the consumer group would on Kafka.
    """

    def __init__(self, dsn: str, auth_file: Path, **settings: object) -> None:
        import uvicorn

        from sagacity import InMemoryJournal, Sagacity, compose
        from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
        from sagacity.dev import pick_free_port

        from .tools import Bank

        self.journal = InMemoryJournal()
        self.agent = Sagacity(self.journal, compensation="delegated")
        self.bank = self.agent.wrap(Bank())
        self.port = pick_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        served = ApprovalsSettings(
            database_url=dsn, auth_file=str(auth_file), port=self.port, **settings
        )
        self.server = ApprovalsServer(
            served,
            dependencies=compose.approvals_on(self.journal, served),
            consume=False,
            tools=[Bank()],
        )
        config = uvicorn.Config(
            self.server.app, host="127.0.0.1", port=self.port, log_level="warning"
        )
        self._uvicorn = uvicorn.Server(config)
        import threading

        self._thread = threading.Thread(target=self._uvicorn.run, daemon=True)

    def __enter__(self) -> LiveService:
        import time

        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._uvicorn.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._uvicorn.should_exit = True
        self._thread.join(10)

    def gate(self, saga_id: str, *, privileged: bool = False) -> int:
        from sagacity import SagaStatus

        def work() -> None:
            self.bank.reserve_inventory("SKU-9")
            if privileged:
                self.bank.grant_agent_access("agent-7", "operator")
            else:
                self.bank.send_wire_transfer("100", "alice")

        result = self.agent.saga(saga_id, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        self.server.service.materialise(saga_id)
        return result.awaiting_seq

    def suspect(self, saga_id: str) -> int:
        """A saga compensated inline whose writer died between a reservation's INTENT and its
        outcome: the step is SUSPECT, and its seq is returned."""
        from sagacity import EntryDraft, EventType, Sagacity, SagaStatus

        from .tools import Bank

        inline = Sagacity(self.journal)
        bank = inline.wrap(Bank())
        inline.saga(saga_id, lambda: bank.reserve_inventory("SKU-1"))
        intent = self.journal.append(
            EntryDraft(
                saga_id=saga_id,
                event_type=EventType.INTENT,
                tool="reserve_inventory",
                payload='{"sku":"SKU-2"}',
                attributes={"reversibility": "REVERSIBLE"},
            )
        )
        result = inline.compensate(saga_id)
        assert result.status is SagaStatus.COMPENSATION_FAILED
        return intent.seq


@pytest.fixture
def live(pg_dsn: str, auth_file: Path) -> Iterator[LiveService]:
    """A running approvals service (see :class:`LiveService`)."""
    with LiveService(pg_dsn, auth_file) as service:
        yield service
