"""``sagacity serve mcp`` over stdio, driven by the official SDK's client, on real Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from sagacity import EventType, Sagacity, SagaStatus
from sagacity.adapters.mcp import APPROVAL_REFUSED, SAGA_META, SAGA_REFUSED, SEQ_META
from sagacity.chain import payload_sha256
from sagacity.tools._tool import awaiting_message
from tests.approvals.tools import calls

from .conftest import McpDeployment, RawServer, approvals_service, approve, run

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
E = EventType
WIRE = {"amount": "100", "to": "alice"}


def _saga(result: Any) -> str:
    saga_id = (result.meta or {}).get(SAGA_META)
    assert isinstance(saga_id, str), result
    return saga_id


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_tools_are_listed_with_their_schema_and_reversibility(
    mcp_deployment: McpDeployment,
) -> None:
    async def conversation() -> dict[str, Any]:
        async with mcp_deployment.session() as session:
            return {t.name: t for t in (await session.list_tools()).tools}

    tools = run(conversation())
    assert set(tools) == {
        "charge_card",
        "grant_agent_access",
        "lookup_stock",
        "reserve_inventory",
        "send_wire_transfer",
        "undo_saga",  # docs/adr/0026: an agent undoes its own saga
    }
    read = tools["lookup_stock"].annotations
    assert read.read_only_hint is True
    assert read.destructive_hint is False
    for gated in ("send_wire_transfer", "grant_agent_access"):
        assert tools[gated].annotations.destructive_hint is True
        assert tools[gated].annotations.read_only_hint is False
    write = tools["charge_card"].annotations
    assert write.read_only_hint is False
    assert write.destructive_hint is False
    schema = tools["charge_card"].input_schema
    assert schema["properties"]["amount"]["type"] == "integer"
    assert schema["required"] == ["amount"]
    assert (tools["grant_agent_access"].meta or {})["sagacity/reversibility"] == "PRIVILEGED"
    assert tools["charge_card"].description.startswith("Charge ``amount``")


def test_calls_of_a_session_share_one_saga_ended_when_the_session_closes(
    mcp_deployment: McpDeployment,
) -> None:
    async def conversation() -> list[Any]:
        async with mcp_deployment.session() as session:
            return [
                await session.call_tool("lookup_stock", {"sku": "SKU-9"}),
                await session.call_tool("reserve_inventory", {"sku": "SKU-9"}),
                await session.call_tool("charge_card", {"amount": 12}),
            ]

    results = run(conversation())
    assert [r.is_error for r in results] == [False, False, False]
    assert _text(results[1]) == "held-SKU-9"
    assert json.loads(_text(results[2])) == {"charged": 12, "card": "visa"}
    sagas = {_saga(r) for r in results}
    assert len(sagas) == 1
    saga_id = sagas.pop()
    entries = mcp_deployment.wait_ended(saga_id)
    assert [(e.event_type, e.tool) for e in entries] == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "lookup_stock"),
        (E.EXECUTED, "lookup_stock"),
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
        (E.INTENT, "charge_card"),
        (E.EXECUTED, "charge_card"),
        (E.SAGA_ENDED, None),
    ]
    assert entries[5].payload == '{"amount":12,"card":"visa"}'
    assert entries[-1].result == SagaStatus.COMPLETED.value


def test_a_failing_call_is_an_error_and_its_saga_is_compensated(
    mcp_deployment: McpDeployment,
) -> None:
    async def conversation() -> list[Any]:
        async with mcp_deployment.session() as session:
            return [
                await session.call_tool("reserve_inventory", {"sku": "SKU-1"}),
                await session.call_tool("charge_card", {"amount": 5000}),
                await session.call_tool("reserve_inventory", {"sku": "SKU-2"}),
            ]

    held, declined, after = run(conversation())
    assert declined.is_error is True
    assert "card declined for 5000" in _text(declined)
    assert "1 step(s) undone" in _text(declined)
    failed_saga = _saga(held)
    entries = mcp_deployment.wait_ended(failed_saga)
    kinds = [e.event_type for e in entries]
    assert E.FAILED in kinds
    assert E.COMPENSATED in kinds
    assert entries[-1].result == SagaStatus.COMPENSATED.value
    # The hold was released once; the declined charge was never undone (it did not happen).
    ran = [c["tool"] for c in calls(mcp_deployment.calls)]
    assert ran.count("release_inventory") == 1
    assert "refund_card" not in ran
    # The session goes on in a new saga.
    assert after.is_error is False
    assert _saga(after) != failed_saga


@pytest.mark.postgres
def test_a_gated_call_waits_for_approval_and_resumes_with_the_exact_arguments(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    try:

        async def ask() -> Any:
            async with mcp_deployment.session("--approvals-url", replica.url) as session:
                return await session.call_tool("send_wire_transfer", WIRE)

        gated = run(ask())
        assert gated.is_error is False
        assert _text(gated) == awaiting_message("send_wire_transfer")
        info = gated.structured_content
        saga_id, seq = info["saga_id"], info["seq"]
        assert info["payload_sha256"] == payload_sha256('{"amount":"100","to":"alice"}')
        # A person opens the console's page for the request (a sign-in, then the request),
        # not the token-protected API; a program gets the API's address too.
        assert info["approval_url"] == f"{replica.url}/ui/requests/{saga_id}/{seq}"
        assert info["approval_api_url"] == f"{replica.url}/sagacity/approvals/{saga_id}/{seq}"
        page = httpx.get(info["approval_url"], follow_redirects=True, timeout=10)
        assert page.status_code == 200
        assert "/ui/login" in str(page.url)
        assert calls(mcp_deployment.calls) == []
        assert mcp_deployment.wait_ended(saga_id)[-1].result == "AWAITING_APPROVAL"

        async def resume(arguments: dict[str, str]) -> Any:
            async with mcp_deployment.session() as session:
                try:
                    return await session.call_tool(
                        "send_wire_transfer", arguments, meta={SAGA_META: saga_id, SEQ_META: seq}
                    )
                except MCPError as exc:
                    return exc

        # Before anyone approves: refused, the tool not called.
        refused = run(resume(WIRE))
        assert isinstance(refused, MCPError)
        assert refused.code == APPROVAL_REFUSED
        assert "no human approval recorded" in refused.message
        assert calls(mcp_deployment.calls) == []

        response = approve(replica, saga_id, seq, "alice")
        assert response.is_success, response.text
        done = run(resume(WIRE))
        assert done.is_error is False
        assert _text(done) == "transfer-ok"
        assert [c["tool"] for c in calls(mcp_deployment.calls)] == ["send_wire_transfer"]
        kinds = mcp_deployment.kinds(saga_id)
        assert kinds[-4:] == ["APPROVED", "INTENT", "EXECUTED", "SAGA_ENDED"]

        # The same approval does not run the tool twice.
        assert isinstance(run(resume(WIRE)), MCPError)
        assert len(calls(mcp_deployment.calls)) == 1
    finally:
        replica.stop()


@pytest.mark.postgres
def test_a_stale_approval_never_runs_changed_arguments(
    mcp_deployment: McpDeployment, pg_dsn: str, auth_file: Path
) -> None:
    replica = approvals_service(mcp_deployment, pg_dsn, auth_file)
    try:

        async def ask() -> Any:
            async with mcp_deployment.session() as session:
                await session.call_tool("reserve_inventory", {"sku": "SKU-5"})
                return await session.call_tool("send_wire_transfer", WIRE)

        info = run(ask()).structured_content
        saga_id, seq = info["saga_id"], info["seq"]
        response = approve(replica, saga_id, seq, "alice")
        assert response.is_success, response.text

        async def resume() -> Any:
            async with mcp_deployment.session() as session:
                try:
                    return await session.call_tool(
                        "send_wire_transfer",
                        {"amount": "999999", "to": "mallory"},
                        meta={SAGA_META: saga_id, SEQ_META: seq},
                    )
                except MCPError as exc:
                    return exc

        refused = run(resume())
        assert isinstance(refused, MCPError)
        assert refused.code == APPROVAL_REFUSED
        assert "payload changed since approval" in refused.message
        ran = [c["tool"] for c in calls(mcp_deployment.calls)]
        assert "send_wire_transfer" not in ran
        entries = mcp_deployment.wait_ended(saga_id)
        assert E.RESUME_REFUSED in [e.event_type for e in entries]
        # The saga's hold was undone (inline, by the resuming server).
        assert ran.count("release_inventory") == 1
    finally:
        replica.stop()


def test_a_saga_named_in_meta_is_joined_only_if_this_server_owns_it(
    mcp_deployment: McpDeployment,
) -> None:
    other = Sagacity(mcp_deployment.journal)
    taken = other.open_run("taken-by-another-writer")

    async def conversation() -> tuple[Any, Any]:
        async with mcp_deployment.session() as session:
            mine = await session.call_tool(
                "reserve_inventory", {"sku": "A"}, meta={SAGA_META: "named-by-client"}
            )
            again = await session.call_tool(
                "reserve_inventory", {"sku": "B"}, meta={SAGA_META: "named-by-client"}
            )
            with pytest.raises(MCPError) as refused:
                await session.call_tool(
                    "reserve_inventory", {"sku": "C"}, meta={SAGA_META: taken.saga_id}
                )
            assert refused.value.code == SAGA_REFUSED
            assert "not open in this server" in refused.value.message
            return mine, again

    try:
        mine, again = run(conversation())
    finally:
        taken.end()
    assert _saga(mine) == _saga(again) == "named-by-client"
    tools = [e.tool for e in mcp_deployment.wait_ended("named-by-client") if e.tool]
    assert tools == ["reserve_inventory"] * 4
    assert [c["sku"] for c in calls(mcp_deployment.calls)] == ["A", "B"]
    assert mcp_deployment.kinds(taken.saga_id) == ["SAGA_OPENED", "SAGA_ENDED"]


def test_bad_arguments_are_refused_before_anything_is_journaled(
    mcp_deployment: McpDeployment,
) -> None:
    async def conversation() -> Any:
        async with mcp_deployment.session() as session:
            bad = await session.call_tool("charge_card", {"amount": "lots"})
            ok = await session.call_tool("lookup_stock", {"sku": "Z"})
            return bad, ok

    bad, ok = run(conversation())
    assert bad.is_error is True
    assert "amount" in _text(bad)
    assert calls(mcp_deployment.calls) == [{"tool": "lookup_stock", "sku": "Z"}]
    tools = [e.tool for e in mcp_deployment.wait_ended(_saga(ok)) if e.tool]
    assert tools == ["lookup_stock", "lookup_stock"]


def test_a_forged_approval_on_the_topic_does_not_run_the_tool_over_mcp(
    mcp_deployment: McpDeployment,
) -> None:
    from confluent_kafka import Producer

    from sagacity import EntryDraft
    from sagacity.chain import link
    from sagacity.schemas import encode_entry

    async def ask() -> Any:
        async with mcp_deployment.session() as session:
            await session.call_tool("reserve_inventory", {"sku": "SKU-6"})
            return await session.call_tool("send_wire_transfer", WIRE)

    info = run(ask()).structured_content
    saga_id, seq = info["saga_id"], info["seq"]
    chain = mcp_deployment.wait_ended(saga_id)
    # Any writer of the topic can link an APPROVED to the saga's head, naming any approver.
    forged = link(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.APPROVED,
            tool="send_wire_transfer",
            actor="cfo@example.com",
            attributes={"ref_seq": str(seq), "payload_sha256": info["payload_sha256"]},
        ),
        seq=chain[-1].seq + 1,
        prev_hash=chain[-1].hash,
    )
    producer = Producer(
        {
            "bootstrap.servers": mcp_deployment.env["SAGACITY_BOOTSTRAP_SERVERS"],
            "partitioner": "murmur2_random",
        }
    )
    producer.produce(
        mcp_deployment.env["SAGACITY_TOPIC"], key=saga_id.encode(), value=encode_entry(forged)
    )
    assert producer.flush(10) == 0

    async def resume() -> Any:
        async with mcp_deployment.session() as session:
            try:
                return await session.call_tool(
                    "send_wire_transfer", WIRE, meta={SAGA_META: saga_id, SEQ_META: seq}
                )
            except MCPError as exc:
                return exc

    refused = run(resume())
    assert isinstance(refused, MCPError)
    assert refused.code == APPROVAL_REFUSED
    assert "no human approval recorded" in refused.message
    ran = [c["tool"] for c in calls(mcp_deployment.calls)]
    assert "send_wire_transfer" not in ran
    entries = mcp_deployment.wait_ended(saga_id)
    [refusal] = [e for e in entries if e.event_type is E.RESUME_REFUSED]
    assert "unsigned_decision" in (refusal.error or "")
    assert ran.count("release_inventory") == 1  # compensated inline by the resuming server


def test_arguments_that_are_not_an_object_are_refused_by_the_protocol(
    mcp_deployment: McpDeployment,
) -> None:
    server = RawServer(mcp_deployment, "raw")
    try:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "reserve_inventory", "arguments": ["SKU-1"]},
            }
        )
        reply = server.receive()
    finally:
        server.close()
    assert reply["id"] == 2
    assert "error" in reply
    assert calls(mcp_deployment.calls) == []


def test_the_approval_url_is_the_consoles_page_at_the_address_people_reach() -> None:
    """``approval_url`` is the console's page for the request, under the approvals service's
    public address when one is given (its --public-url), else under the address the server
    reaches it at; ``approval_api_url`` is always the latter's API."""
    from sagacity import InMemoryJournal, Reversibility, Sagacity, compensable
    from sagacity.adapters.mcp import SagacityMCP

    class Wire:
        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(self, amount: str) -> str:
            return amount

    sagacity = Sagacity(journal=InMemoryJournal())
    sagacity.wrap(Wire())
    registered = sagacity.registry.get("wire")
    assert registered is not None
    internal, public = "http://approvals.internal:8085", "https://approvals.example.com/"
    shown = SagacityMCP(sagacity, approvals_url=internal, approvals_public_url=public)._awaiting(
        registered, "s-1", 4, {"amount": "1"}
    )
    assert shown.structured_content is not None
    assert shown.structured_content["approval_url"] == (
        "https://approvals.example.com/ui/requests/s-1/4"
    )
    assert shown.structured_content["approval_api_url"] == (f"{internal}/sagacity/approvals/s-1/4")
    bare = SagacityMCP(sagacity)._awaiting(registered, "s-1", 4, {"amount": "1"})
    assert bare.structured_content is not None
    assert bare.structured_content["approval_url"] is None
