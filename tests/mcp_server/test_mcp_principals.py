"""MCP callers are agents: served their own tools, owners of the sagas they open, never approvers.

Real Kafka, a real approvals service process on PostgreSQL, and the official SDK's client over
stdio and streamable HTTP.  The principals file (tests/approvals/conftest.py) holds approvers,
an auditor, dave (an approver bound to ``agent@example.com``), and three agents: ``agent`` and
``agent2`` with every tool, ``scoped`` with the hold and the stock lookup only.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from sagacity import EventType
from sagacity.adapters.mcp import APPROVAL_REFUSED, SAGA_META, SAGA_REFUSED, SEQ_META, TOOL_REFUSED
from tests.approvals._process import REPO
from tests.approvals.conftest import TOKENS
from tests.approvals.tools import calls

from .conftest import (
    CLI,
    McpDeployment,
    approvals_service,
    approve,
    http_server,
    http_session,
    run,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.postgres]
E = EventType
WIRE = {"amount": "100", "to": "alice"}
GRANT = {"principal": "agent-9", "role": "operator"}
AGENT = "agent@example.com"


def _token_file(tmp: Path, who: str) -> Path:
    path = tmp / f"{who}.token"
    path.write_text(TOKENS[who] + "\n")
    return path


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def _request(deployment: McpDeployment, saga_id: str, seq: int) -> Any:
    return next(e for e in deployment.entries(saga_id) if e.seq == seq)


def _stdio_as(deployment: McpDeployment, auth_file: Path, who: str) -> list[str]:
    return ["--auth", str(auth_file), "--token-file", str(_token_file(deployment.tmp, who))]


def test_an_agent_cannot_approve_its_own_request_over_stdio(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    as_agent = _stdio_as(mcp_deployment, auth_file, "agent")
    try:

        async def ask() -> Any:
            async with mcp_deployment.session(*as_agent) as session:
                return await session.call_tool("send_wire_transfer", WIRE)

        info = run(ask()).structured_content
        saga_id, seq = info["saga_id"], info["seq"]
        assert _request(mcp_deployment, saga_id, seq).attributes["caller"] == AGENT
        # The agent's own token approves nothing; nor does dave, whose agent it is.
        own = approve(replica, saga_id, seq, "agent")
        assert own.status_code == 403, own.text
        assert "agent principal" in own.json()["detail"]
        bound = approve(replica, saga_id, seq, "dave")
        assert bound.status_code == 403, bound.text
        assert "nobody decides their own request" in bound.json()["detail"]
        assert E.APPROVED.value not in mcp_deployment.kinds(saga_id)
        # Another approver does; the agent resumes its own request.
        assert approve(replica, saga_id, seq, "alice").is_success

        async def resume() -> Any:
            async with mcp_deployment.session(*as_agent) as session:
                return await session.call_tool(
                    "send_wire_transfer", WIRE, meta={SAGA_META: saga_id, SEQ_META: seq}
                )

        assert _text(run(resume())) == "transfer-ok"
        approvals = [e.actor for e in mcp_deployment.entries(saga_id) if e.event_type is E.APPROVED]
        assert approvals == ["alice@example.com"]
    finally:
        replica.stop()


def test_a_privileged_request_over_http_is_signed_by_two_approvers_not_by_its_agent(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    try:
        with http_server(mcp_deployment, auth_file) as url:

            async def ask() -> Any:
                async with http_session(url, "agent") as session:
                    return await session.call_tool("grant_agent_access", GRANT)

            info = run(ask()).structured_content
            saga_id, seq = info["saga_id"], info["seq"]
            assert _request(mcp_deployment, saga_id, seq).attributes["caller"] == AGENT
            for who in ("agent", "dave"):
                refused = approve(replica, saga_id, seq, who)
                assert refused.status_code == 403, (who, refused.text)
            assert E.APPROVED.value not in mcp_deployment.kinds(saga_id)
            for who in ("alice", "carol"):
                assert approve(replica, saga_id, seq, who).is_success

            async def resume() -> Any:
                async with http_session(url, "agent") as session:
                    return await session.call_tool(
                        "grant_agent_access", GRANT, meta={SAGA_META: saga_id, SEQ_META: seq}
                    )

            assert _text(run(resume())) == "granted operator"
        signers = [e.actor for e in mcp_deployment.entries(saga_id) if e.event_type is E.APPROVED]
        assert signers == ["alice@example.com", "carol@example.com"]
    finally:
        replica.stop()


def test_an_approvers_token_is_refused_by_the_mcp_server_with_one_line(
    mcp_deployment: McpDeployment, auth_file: Path
) -> None:
    with http_server(mcp_deployment, auth_file) as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        refused = httpx.post(
            url,
            json=body,
            headers={
                "accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {TOKENS['alice']}",
            },
        )
        assert refused.status_code == 403
        assert "alice@example.com is an approver, not an agent" in refused.json()["error"]
    started = subprocess.run(
        [
            *CLI,
            *mcp_deployment.command,
            *mcp_deployment.args,
            *_stdio_as(mcp_deployment, auth_file, "audit"),
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        env=mcp_deployment.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    errors = [x for x in started.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, started.stderr
    [line] = errors
    assert "audit@example.com is an auditor, not an agent" in line
    assert "token-hash --role agent" in line


def test_a_scoped_agent_lists_and_calls_only_its_own_tools(
    mcp_deployment: McpDeployment, auth_file: Path
) -> None:
    async def conversation(session: Any) -> tuple[set[str], Any, Any]:
        listed = {t.name for t in (await session.list_tools()).tools}
        try:
            await session.call_tool("send_wire_transfer", WIRE)
            refused = None
        except MCPError as exc:
            refused = exc
        held = await session.call_tool("reserve_inventory", {"sku": "SKU-S"})
        return listed, refused, held

    async def over_stdio() -> Any:
        async with mcp_deployment.session(*_stdio_as(mcp_deployment, auth_file, "scoped")) as s:
            return await conversation(s)

    with http_server(mcp_deployment, auth_file, idle_timeout=1) as url:

        async def over_http() -> Any:
            async with http_session(url, "scoped") as session:
                return await conversation(session)

        outcomes = [run(over_stdio()), run(over_http())]
    for listed, refused, held in outcomes:
        assert listed == {"lookup_stock", "reserve_inventory"}
        assert isinstance(refused, MCPError)
        assert refused.code == TOOL_REFUSED
        assert "not among the tools of scoped@example.com" in refused.message
        assert held.is_error is False
    ran = [c["tool"] for c in calls(mcp_deployment.calls)]
    assert ran == ["reserve_inventory", "reserve_inventory"]


def test_a_saga_opened_by_one_agent_is_not_joined_by_another(
    mcp_deployment: McpDeployment, auth_file: Path
) -> None:
    shared = f"booking-{uuid.uuid4().hex[:8]}"

    with http_server(mcp_deployment, auth_file) as url:

        async def both() -> tuple[Any, MCPError | None]:
            async with http_session(url, "agent") as victim, http_session(url, "agent2") as other:
                booked = await victim.call_tool(
                    "reserve_inventory", {"sku": "SEAT-1"}, meta={SAGA_META: shared}
                )
                try:
                    await other.call_tool("send_wire_transfer", WIRE, meta={SAGA_META: shared})
                    refused = None
                except MCPError as exc:
                    refused = exc
                await victim.call_tool(
                    "reserve_inventory", {"sku": "SEAT-2"}, meta={SAGA_META: shared}
                )
                return booked, refused

        booked, refused = run(both())
    assert booked.is_error is False
    assert isinstance(refused, MCPError)
    assert refused.code == SAGA_REFUSED
    assert "opened by another principal" in refused.message
    entries = mcp_deployment.wait_ended(shared)
    # The victim's saga holds its own calls only, and ended as it should: nothing suspended.
    assert [e.tool for e in entries if e.event_type is E.INTENT] == ["reserve_inventory"] * 2
    assert {e.attributes.get("caller") for e in entries if e.event_type is E.INTENT} == {AGENT}
    assert E.AWAITING_APPROVAL not in [e.event_type for e in entries]
    assert entries[-1].result == "COMPLETED"
    assert "send_wire_transfer" not in [c["tool"] for c in calls(mcp_deployment.calls)]


def test_only_the_agent_that_made_a_request_resumes_it_over_mcp(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    try:
        with http_server(mcp_deployment, auth_file) as url:

            async def call(who: str, meta: dict[str, Any] | None = None) -> Any:
                async with http_session(url, who) as session:
                    try:
                        return await session.call_tool("send_wire_transfer", WIRE, meta=meta)
                    except MCPError as exc:
                        return exc

            info = run(call("agent")).structured_content
            saga_id, seq = info["saga_id"], info["seq"]
            assert approve(replica, saga_id, seq, "alice").is_success
            before = mcp_deployment.kinds(saga_id)
            taken = run(call("agent2", {SAGA_META: saga_id, SEQ_META: seq}))
            assert isinstance(taken, MCPError)
            assert taken.code == APPROVAL_REFUSED
            assert "made by another principal" in taken.message
            # Nothing journaled, nothing run, nothing undone: the request still waits for its
            # own agent.
            assert mcp_deployment.kinds(saga_id) == before
            assert calls(mcp_deployment.calls) == []
            done = run(call("agent", {SAGA_META: saga_id, SEQ_META: seq}))
            assert _text(done) == "transfer-ok"
        [intent] = [
            e
            for e in mcp_deployment.entries(saga_id)
            if e.event_type is E.INTENT and e.tool == "send_wire_transfer"
        ]
        assert intent.attributes["requested_by"] == AGENT
    finally:
        replica.stop()


def test_a_stdio_server_without_principals_resumes_no_request_an_agent_made(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    try:

        async def ask() -> Any:
            async with mcp_deployment.session(*_stdio_as(mcp_deployment, auth_file, "agent")) as s:
                return await s.call_tool("send_wire_transfer", WIRE)

        info = run(ask()).structured_content
        saga_id, seq = info["saga_id"], info["seq"]
        assert approve(replica, saga_id, seq, "alice").is_success

        async def unscoped() -> Any:
            async with mcp_deployment.session() as session:
                try:
                    return await session.call_tool(
                        "send_wire_transfer", WIRE, meta={SAGA_META: saga_id, SEQ_META: seq}
                    )
                except MCPError as exc:
                    return exc

        refused = run(unscoped())
        assert isinstance(refused, MCPError)
        assert refused.code == APPROVAL_REFUSED
        assert calls(mcp_deployment.calls) == []
    finally:
        replica.stop()
