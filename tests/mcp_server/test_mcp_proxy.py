"""``sagacity mcp proxy`` in front of a small MCP server with the seed's tools, on real Kafka."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from sagacity import EventType
from sagacity.adapters.mcp import APPROVAL_REFUSED, SAGA_META, SEQ_META
from tests.approvals._process import REPO
from tests.approvals.tools import calls

from .conftest import McpDeployment, RawServer, approvals_service, approve, run

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
E = EventType
HERE = Path(__file__).parent
POLICY = HERE / "helpdesk-policy.toml"
UPSTREAM = f"{sys.executable} -m tests.mcp_server.upstream"


@pytest.fixture
def proxy(mcp_deployment: McpDeployment) -> McpDeployment:
    mcp_deployment.env["SAGACITY_TEST_UPSTREAM_STATE"] = str(mcp_deployment.tmp / "state.json")
    mcp_deployment.command = ["mcp", "proxy"]
    mcp_deployment.args = [
        "--upstream",
        UPSTREAM,
        "--policy",
        str(POLICY),
        "--compensation",
        "inline",
        "--upstream-timeout",
        "3",
    ]
    return mcp_deployment


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def _tickets(deployment: McpDeployment) -> dict[str, str]:
    state = Path(deployment.env["SAGACITY_TEST_UPSTREAM_STATE"])
    return json.loads(state.read_text())["tickets"] if state.exists() else {}


def test_the_proxy_lists_upstream_tools_with_the_policys_reversibility(
    proxy: McpDeployment,
) -> None:
    async def conversation() -> dict[str, Any]:
        async with proxy.session() as session:
            return {t.name: t for t in (await session.list_tools()).tools}

    tools = run(conversation())
    assert tools.pop("undo_saga").annotations.destructive_hint is True  # docs/adr/0026
    reversibility = {n: (t.meta or {})["sagacity/reversibility"] for n, t in tools.items()}
    assert reversibility == {
        "crash_server": "COMPENSATABLE",
        "export_tickets": "READ",
        "garble_reply": "COMPENSATABLE",
        "grant_agent_access": "PRIVILEGED",
        "place_hold": "COMPENSATABLE",
        "refund_invoice": "IRREVERSIBLE",
        "release_hold": "COMPENSATABLE",
        "run_query": "READ",
        "update_ticket_status": "REVERSIBLE",
    }
    assert tools["refund_invoice"].annotations.destructive_hint is True
    assert tools["run_query"].annotations.read_only_hint is True
    # The upstream's own schema and description are served unchanged.
    schema = tools["update_ticket_status"].input_schema
    assert set(schema["properties"]) == {"ticket_id", "status"}
    assert tools["update_ticket_status"].description.startswith("Set a ticket's status")


def test_a_failed_upstream_call_is_compensated_through_the_upstreams_own_undo(
    proxy: McpDeployment,
) -> None:
    async def conversation() -> list[Any]:
        async with proxy.session() as session:
            return [
                await session.call_tool(
                    "update_ticket_status", {"ticket_id": "T-4003", "status": "closed"}
                ),
                await session.call_tool(
                    "update_ticket_status", {"ticket_id": "T-9999", "status": "closed"}
                ),
            ]

    closed, missing = run(conversation())
    assert closed.is_error is False
    assert json.loads(_text(closed))["previous_status"] == "pending"
    assert missing.is_error is True
    assert "no ticket T-9999" in _text(missing)
    saga_id = closed.meta[SAGA_META]
    entries = proxy.wait_ended(saga_id)
    executed = next(e for e in entries if e.event_type is E.EXECUTED)
    assert executed.attributes["undo_tool"] == "update_ticket_status"
    assert json.loads(executed.attributes["undo_arguments"]) == {
        "ticket_id": "T-4003",
        "status": "pending",
    }
    assert E.COMPENSATED in [e.event_type for e in entries]
    assert entries[-1].result == "COMPENSATED"
    # Put back upstream, by the upstream's own undo call.
    assert _tickets(proxy)["T-4003"] == "pending"
    statuses = [c["status"] for c in calls(proxy.calls) if c["tool"] == "update_ticket_status"]
    assert statuses == ["closed", "closed", "pending"]


def test_an_undo_the_policy_names_is_called_upstream_with_the_calls_and_results_values(
    proxy: McpDeployment,
) -> None:
    async def conversation() -> list[Any]:
        async with proxy.session() as session:
            return [
                await session.call_tool("place_hold", {"sku": "SKU-7"}),
                await session.call_tool(
                    "update_ticket_status", {"ticket_id": "T-0000", "status": "closed"}
                ),
            ]

    held, failed = run(conversation())
    assert failed.is_error is True
    entries = proxy.wait_ended(held.meta[SAGA_META])
    executed = next(e for e in entries if e.event_type is E.EXECUTED)
    assert executed.attributes["undo_tool"] == "release_hold"
    assert json.loads(executed.attributes["undo_arguments"]) == {
        "hold_id": "H-SKU-7",
        "sku": "SKU-7",
    }
    assert entries[-1].result == "COMPENSATED"
    released = [c for c in calls(proxy.calls) if c["tool"] == "release_hold"]
    assert released == [{"tool": "release_hold", "hold_id": "H-SKU-7", "sku": "SKU-7"}]


@pytest.mark.postgres
def test_a_gated_upstream_call_is_approved_then_resumed_with_the_same_arguments(
    proxy: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(proxy, pg_dsn, auth_file)
    try:

        async def ask() -> Any:
            async with proxy.session() as session:
                return await session.call_tool(
                    "refund_invoice", {"invoice_id": "INV-7002", "amount": 39900}
                )

        gated = run(ask())
        info = gated.structured_content
        saga_id, seq = info["saga_id"], info["seq"]
        assert [c["tool"] for c in calls(proxy.calls)] == []
        request = proxy.entries(saga_id)[seq - 1]
        assert request.payload == '{"amount":39900,"invoice_id":"INV-7002"}'
        response = approve(replica, saga_id, seq, "bob")
        assert response.is_success, response.text

        async def resume(arguments: dict[str, Any]) -> Any:
            async with proxy.session() as session:
                try:
                    return await session.call_tool(
                        "refund_invoice", arguments, meta={SAGA_META: saga_id, SEQ_META: seq}
                    )
                except MCPError as exc:
                    return exc

        changed = run(resume({"invoice_id": "INV-7002", "amount": 99999}))
        assert isinstance(changed, MCPError)
        assert changed.code == APPROVAL_REFUSED
        assert "payload changed since approval" in changed.message
        assert calls(proxy.calls) == []
    finally:
        replica.stop()


@pytest.mark.postgres
def test_an_access_grant_needs_two_people_and_the_upstream_refuses_the_admin_role(
    proxy: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:

    replica = approvals_service(proxy, pg_dsn, auth_file)

    async def ask(role: str) -> Any:
        async with proxy.session() as session:
            return await session.call_tool(
                "grant_agent_access", {"principal": "agent-7", "role": role}
            )

    async def resume(saga_id: str, seq: int, role: str) -> Any:
        async with proxy.session() as session:
            try:
                return await session.call_tool(
                    "grant_agent_access",
                    {"principal": "agent-7", "role": role},
                    meta={SAGA_META: saga_id, SEQ_META: seq},
                )
            except MCPError as exc:
                return exc

    try:
        outcomes = {}
        for role in ("ops", "admin"):
            info = run(ask(role)).structured_content
            saga_id, seq = info["saga_id"], info["seq"]
            assert approve(replica, saga_id, seq, "alice").is_success
            once = run(resume(saga_id, seq, role))
            assert isinstance(once, MCPError)  # one signature of two
            assert (
                approve(replica, saga_id, seq, "alice").status_code == 409
            )  # the same person twice
            assert approve(replica, saga_id, seq, "bob").is_success
            outcomes[role] = (saga_id, run(resume(saga_id, seq, role)))
    finally:
        replica.stop()
    granted = outcomes["ops"][1]
    assert granted.is_error is False
    assert json.loads(_text(granted)) == {"granted": "ops", "principal": "agent-7"}
    refused = outcomes["admin"][1]
    assert refused.is_error is True
    assert "granting the admin role is not delegated to an agent" in _text(refused)
    assert [c["role"] for c in calls(proxy.calls) if c["tool"] == "grant_agent_access"] == ["ops"]
    kinds = [e.event_type for e in proxy.wait_ended(outcomes["admin"][0])]
    assert E.FAILED in kinds


def test_an_upstream_that_hangs_crashes_or_garbles_fails_the_call_boundedly(
    proxy: McpDeployment,
) -> None:
    async def conversation() -> list[Any]:
        out = []
        async with proxy.session() as session:
            started = time.monotonic()
            out.append(await session.call_tool("export_tickets", {"seconds": 30}))
            out.append(time.monotonic() - started)
            out.append(await session.call_tool("crash_server", {}))
            out.append(await session.call_tool("run_query", {"sql": "select 1"}))
            out.append(await session.call_tool("garble_reply", {}))
            out.append(await session.call_tool("run_query", {"sql": "select 2"}))
        return out

    hung, waited, crashed, after_crash, garbled, after_garble = run(conversation())
    assert hung.is_error is True
    assert "did not answer within 3s" in _text(hung)
    assert waited < 20
    assert crashed.is_error is True
    assert "failed" in _text(crashed)
    # The proxy reconnects: a new upstream process answers the next call.
    assert after_crash.is_error is False
    assert garbled.is_error is True
    assert after_garble.is_error is False
    for result in (hung, crashed, garbled):
        kinds = [e.event_type for e in proxy.wait_ended(_saga_of(proxy, result))]
        assert E.FAILED in kinds


def _saga_of(deployment: McpDeployment, result: Any) -> str:
    """The saga a failed call was journaled in (its text names it)."""
    text = _text(result)
    start = text.index("Saga '") + len("Saga '")
    return text[start : text.index("'", start)]


def test_a_proxy_killed_mid_call_leaves_the_intent_on_the_chain(proxy: McpDeployment) -> None:
    server = RawServer(proxy, "killed")
    try:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "export_tickets",
                    "arguments": {"seconds": 2.5},
                    "_meta": {SAGA_META: "killed-mid-call"},
                },
            }
        )
        deadline = time.monotonic() + 30
        while not any(c["tool"] == "export_tickets" for c in calls(proxy.calls)):
            assert time.monotonic() < deadline, "the upstream was never called"
            time.sleep(0.05)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
    finally:
        server.close()
    entries = proxy.entries("killed-mid-call")
    assert [(e.event_type, e.tool) for e in entries] == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "export_tickets"),
    ]


@pytest.mark.postgres
def test_the_compensation_service_undoes_through_the_upstream(
    proxy: McpDeployment, pg_dsn: str
) -> None:
    proxy.args[proxy.args.index("inline")] = "delegated"
    env = {**proxy.env, "SAGACITY_DATABASE_URL": pg_dsn}
    log = (proxy.tmp / "compensation.log").open("ab")
    service = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sagacity.cli import main; main()",
            "serve",
            "compensation",
            "--mcp-upstream",
            UPSTREAM,
            "--policy",
            str(POLICY),
            "--group",
            f"compensation-{env['SAGACITY_TOPIC']}",
            "--handoff-grace",
            "1",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        async def conversation() -> list[Any]:
            async with proxy.session() as session:
                return [
                    await session.call_tool(
                        "update_ticket_status", {"ticket_id": "T-4004", "status": "closed"}
                    ),
                    await session.call_tool(
                        "update_ticket_status", {"ticket_id": "T-0000", "status": "closed"}
                    ),
                ]

        closed, missing = run(conversation())
        assert missing.is_error is True
        assert "compensation was handed to the compensation service" in _text(missing)
        entries = proxy.wait_ended(closed.meta[SAGA_META], timeout=60)
        while entries[-1].result != "COMPENSATED":
            time.sleep(0.2)
            entries = proxy.entries(closed.meta[SAGA_META])
            assert service.poll() is None, (proxy.tmp / "compensation.log").read_text()[-3000:]
        compensated = [e for e in entries if e.event_type is E.COMPENSATED]
        assert len(compensated) == 1
        assert _tickets(proxy)["T-4004"] == "open"
    finally:
        service.terminate()
        service.wait(15)
        log.close()
