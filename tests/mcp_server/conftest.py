"""Fixtures of the MCP tests: ``sagacity serve mcp`` processes reached through the SDK's client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from sagacity import EventType, JournalEntry
from sagacity.producer import KafkaJournal
from sagacity.signing._decision_signature import generate_key
from tests.approvals._process import REPO, Replica
from tests.approvals.conftest import TOKENS, auth_file, bearer

__all__ = ["auth_file"]  # the approvals tests' principals file, for the MCP tests too

SERVE = [sys.executable, "-c", "from sagacity.cli import main; main()", "serve", "mcp"]
CLI = [sys.executable, "-c", "from sagacity.cli import main; main()"]


class McpDeployment:
    """A topic, a call log and the environment of the MCP server processes started on it."""

    def __init__(self, bootstrap: str, topic: str, tmp: Path) -> None:
        self.tmp = tmp
        self.calls = tmp / "calls.jsonl"
        # The approvals service signs its decisions; the MCP server verifies them.
        key = generate_key(tmp / "approvals.pem")
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "SAGACITY_KEY_ENCRYPTION_KEY_FILE"},
            # The protocol is the subject, in clear (said explicitly): the test's own journal
            # reads the servers' events without keys.
            "SAGACITY_ALLOW_CLEAR_DATA": "1",
            "SAGACITY_BOOTSTRAP_SERVERS": bootstrap,
            "SAGACITY_TOPIC": topic,
            "SAGACITY_TEST_CALL_LOG": str(self.calls),
            "PYTHONPATH": str(REPO),
            "SAGACITY_APPROVALS_SIGNING_KEY": str(tmp / "approvals.pem"),
            "SAGACITY_APPROVALS_PUBLIC_KEY": key.public_hex,
        }
        self.journal = KafkaJournal(bootstrap, topic=topic)
        self.command = ["serve", "mcp"]
        self.args = ["--tools", "tests.mcp_server.tools:Desk", "--compensation", "inline"]

    def stdio(self, *extra: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=CLI[0],
            args=[*CLI[1:], *self.command, *self.args, "--log-level", "WARNING", *extra],
            env=self.env,
            cwd=str(REPO),
        )

    @contextlib.asynccontextmanager
    async def session(self, *extra: str) -> AsyncIterator[ClientSession]:
        """A client session with a fresh stdio server process (it exits with the session)."""
        with (self.tmp / "mcp-server.log").open("a", encoding="utf-8") as errlog:
            async with (
                stdio_client(self.stdio(*extra), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                yield session

    def entries(self, saga_id: str) -> list[JournalEntry]:
        return list(self.journal.entries(saga_id))

    def kinds(self, saga_id: str) -> list[str]:
        return [e.event_type.value for e in self.entries(saga_id)]

    def wait_ended(self, saga_id: str, timeout: float = 30.0) -> list[JournalEntry]:
        """The saga's chain once it holds a ``SAGA_ENDED`` (the last one after compensation)."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.entries(saga_id)
            if entries and entries[-1].event_type is EventType.SAGA_ENDED:
                return entries
            if time.monotonic() > deadline:
                raise TimeoutError(f"saga {saga_id} not ended: {[e.event_type for e in entries]}")
            time.sleep(0.1)

    def close(self) -> None:
        self.journal.close()


@pytest.fixture
def mcp_deployment(
    kafka_bootstrap: str, make_topic: Any, tmp_path: Path
) -> Iterator[McpDeployment]:
    deployment = McpDeployment(kafka_bootstrap, make_topic(), tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


def run(coroutine: Any) -> Any:
    """Run one client conversation to its end."""
    return asyncio.run(coroutine)


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Wait until something answers HTTP at ``url``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def approvals_service(deployment: McpDeployment, dsn: str, auth_file: Path) -> Replica:
    """A ``sagacity serve approvals`` process on the deployment's topic, ready."""
    replica = Replica(
        {**deployment.env, "SAGACITY_DATABASE_URL": dsn},
        ["--auth", str(auth_file), "--tools", "tests.mcp_server.tools:Desk"],
        deployment.tmp / "approvals.log",
    )
    replica.wait_ready()
    return replica


def approve(replica: Replica, saga_id: str, seq: int, who: str) -> httpx.Response:
    """``who`` approves the request, once the service has folded it from the topic."""
    url = f"{replica.url}/sagacity/approve/{saga_id}/{seq}"
    for _ in range(300):
        shown = httpx.get(
            f"{replica.url}/sagacity/approvals/{saga_id}/{seq}", headers=bearer(who), timeout=10
        )
        if shown.status_code == 200:
            body = {"request_hash": shown.json()["request_hash"]}
            return httpx.post(url, json=body, headers=bearer(who), timeout=10)
        if shown.status_code != 404:
            return shown
        time.sleep(0.1)
    return shown


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test-client", "version": "1"},
    },
}


class RawServer:
    """An MCP server process spoken to in raw JSON-RPC lines (for what the SDK's client
    would not send, and for killing the server mid-call)."""

    def __init__(self, deployment: McpDeployment, name: str) -> None:
        self._errlog = (deployment.tmp / f"{name}.log").open("wb")
        self.process = subprocess.Popen(
            [*CLI, *deployment.command, *deployment.args, "--log-level", "WARNING"],
            cwd=REPO,
            env=deployment.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errlog,
        )
        self.send(INITIALIZE)
        assert self.receive()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the server closed its output"
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()
        self._errlog.close()


@contextlib.contextmanager
def http_server(
    deployment: McpDeployment, auth_file: Path, *extra: str, idle_timeout: float = 30.0
) -> Iterator[str]:
    """A ``sagacity serve mcp --transport http`` process on the deployment; yields its URL."""
    from sagacity.dev import pick_free_port

    port = pick_free_port()
    log = (deployment.tmp / f"mcp-http-{port}.log").open("ab")
    process = subprocess.Popen(
        [
            *SERVE,
            *deployment.args,
            "--transport",
            "http",
            "--port",
            str(port),
            "--auth",
            str(auth_file),
            "--idle-timeout",
            str(idle_timeout),
            "--log-level",
            "WARNING",
            *extra,
        ],
        cwd=REPO,
        env=deployment.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_http(url)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


@contextlib.asynccontextmanager
async def http_session(url: str, who: str) -> AsyncIterator[ClientSession]:
    """An SDK client session over streamable HTTP with ``who``'s bearer token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[who]}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
