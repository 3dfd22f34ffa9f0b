"""``sagacity serve mcp --transport http``: bearer tokens from the principals file, real Kafka."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from sagacity import EventType
from sagacity.adapters.mcp import SAGA_META
from sagacity.dev import pick_free_port
from tests.approvals._process import REPO
from tests.approvals.conftest import TOKENS
from tests.approvals.tools import calls

from .conftest import SERVE, McpDeployment, run, wait_http

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def http_server(mcp_deployment: McpDeployment, auth_file: Path) -> Iterator[str]:
    port = pick_free_port()
    log = (mcp_deployment.tmp / "mcp-http.log").open("ab")
    process = subprocess.Popen(
        [
            *SERVE,
            *mcp_deployment.args,
            "--transport",
            "http",
            "--port",
            str(port),
            "--auth",
            str(auth_file),
            "--idle-timeout",
            "1",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        env=mcp_deployment.env,
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


def test_http_without_a_known_bearer_token_is_refused(http_server: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream"}
    anonymous = httpx.post(http_server, json=body, headers=headers)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.post(
        http_server, json=body, headers={**headers, "Authorization": "Bearer not-a-token"}
    )
    assert wrong.status_code == 401
    assert "not-a-token" not in wrong.text


def test_http_calls_journal_the_callers_principal_and_end_when_idle(
    http_server: str, mcp_deployment: McpDeployment
) -> None:
    async def conversation() -> Any:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['agent']}"})
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("reserve_inventory", {"sku": "SKU-H"})

    result = run(conversation())
    assert result.is_error is False
    saga_id = result.meta[SAGA_META]
    entries = mcp_deployment.wait_ended(saga_id)
    intent = next(e for e in entries if e.event_type is EventType.INTENT)
    assert intent.attributes["caller"] == "agent@example.com"
    assert entries[-1].result == "COMPLETED"
    assert calls(mcp_deployment.calls) == [{"tool": "reserve_inventory", "sku": "SKU-H"}]
