"""Agents are not approvers, nobody decides their own request, and reads follow scopes.

Through the real HTTP API (FastAPI's test client) on the in-memory journal and a real
PostgreSQL working table, as the other API tests: the principals file of ``conftest`` holds
approvers, an auditor, two agents and dave, an approver bound to ``agent@example.com``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import EventType, SagaStatus
from sagacity.saga._scope import calling_as

from .conftest import ALICE, LiveService, bearer, entry_text
from .test_api import Harness, wires

pytestmark = pytest.mark.postgres
E = EventType
AGENT = "agent@example.com"


@pytest.fixture
def harness(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(log))
    h = Harness(pg_dsn, auth_file, log)
    with h.client:
        yield h


def _gate_as(harness: Harness, saga_id: str, caller: str, *, privileged: bool = False) -> int:
    """A gated call made by ``caller`` (journaled as the request's ``caller``, as the MCP
    server journals its client)."""
    with calling_as(caller):
        return harness.gate(saga_id, privileged=privileged)


def test_an_agents_token_neither_decides_nor_reads_in_the_approvals_api(
    harness: Harness,
) -> None:
    seq = _gate_as(harness, "t-agent-api", AGENT)
    me = bearer("agent")
    answers = [
        harness.client.get("/sagacity/approvals", headers=me),
        harness.client.get(f"/sagacity/approvals/t-agent-api/{seq}", headers=me),
        harness.client.get("/sagacity/sagas/t-agent-api", headers=me),
        harness.client.post(
            f"/sagacity/approve/t-agent-api/{seq}",
            json=harness.shown("t-agent-api", seq),
            headers=me,
        ),
        harness.client.post(f"/sagacity/reject/t-agent-api/{seq}", headers=me),
        harness.client.post(
            f"/sagacity/resume/t-agent-api/{seq}", json={"payload": ALICE}, headers=me
        ),
    ]
    assert [a.status_code for a in answers] == [403] * 6
    assert all("agent principal" in a.json()["detail"] for a in answers)
    assert harness.entries("t-agent-api", E.APPROVED) == []
    assert harness.entries("t-agent-api", E.REJECTED) == []
    assert wires(harness.log) == []


def test_nobody_decides_their_own_request_and_a_privileged_one_needs_two_other_approvers(
    harness: Harness,
) -> None:
    seq = _gate_as(harness, "t-own", AGENT, privileged=True)
    [request] = harness.entries("t-own", E.AWAITING_APPROVAL)
    assert request.attributes["caller"] == AGENT
    # dave is bound to the agent that asked: neither his approval nor his veto counts.
    for verb in ("approve", "reject"):
        refused = harness.client.post(f"/sagacity/{verb}/t-own/{seq}", headers=bearer("dave"))
        assert refused.status_code == 403, refused.text
        assert "nobody decides their own request" in refused.json()["detail"]
        assert "made by its agent (agent@example.com)" in refused.json()["detail"]
    assert harness.entries("t-own", E.APPROVED) == []
    assert harness.entries("t-own", E.REJECTED) == []
    # Two approvers who did not ask sign; the grant runs.
    for who in ("alice", "carol"):
        signed = harness.client.post(
            f"/sagacity/approve/t-own/{seq}", json=harness.shown("t-own", seq), headers=bearer(who)
        )
        assert signed.status_code == 200, signed.text
    signers = [e.actor for e in harness.entries("t-own", E.APPROVED)]
    assert signers == ["alice@example.com", "carol@example.com"]
    resumed = harness.client.post(
        f"/sagacity/resume/t-own/{seq}",
        json={"payload": '{"principal":"agent-7","role":"operator"}'},
        headers=bearer("alice"),
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["saga_status"] == SagaStatus.COMPLETED.value


def test_an_approver_named_as_the_requests_caller_may_not_approve_it(harness: Harness) -> None:
    seq = _gate_as(harness, "t-mine", "alice@example.com")
    refused = harness.client.post(
        f"/sagacity/approve/t-mine/{seq}",
        json=harness.shown("t-mine", seq),
        headers=bearer("alice"),
    )
    assert refused.status_code == 403
    assert "it is its own (alice@example.com)" in refused.json()["detail"]
    assert harness.entries("t-mine", E.APPROVED) == []
    # The request waits for someone else.
    approved = harness.client.post(
        f"/sagacity/approve/t-mine/{seq}", json=harness.shown("t-mine", seq), headers=bearer("bob")
    )
    assert approved.status_code == 200, approved.text


def test_the_requests_writer_identity_counts_as_its_maker(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The harness's agent writes as "agent": an approver bound to that writer id is its maker.
    auth_file.write_text(
        auth_file.read_text()
        + entry_text("owner@example.com", "tok-owner", ["*"], role="approver", agents=["agent"])
    )
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    h = Harness(pg_dsn, auth_file, tmp_path / "calls.jsonl")
    with h.client:
        seq = h.gate("t-writer")
        [request] = h.entries("t-writer", E.AWAITING_APPROVAL)
        assert request.actor == "agent"
        assert "caller" not in request.attributes
        refused = h.client.post(
            f"/sagacity/approve/t-writer/{seq}", headers={"Authorization": "Bearer tok-owner"}
        )
        assert refused.status_code == 403, refused.text
        assert "made by its agent (agent)" in refused.json()["detail"]
        assert h.entries("t-writer", E.APPROVED) == []


def test_a_narrow_approver_reads_no_saga_of_another_tool_and_an_auditor_reads_all(
    harness: Harness,
) -> None:
    seq = harness.gate("t-read")  # a hold, then a wire
    # carol decides grant_agent_access alone: the saga is unknown to her.
    hidden = harness.client.get("/sagacity/sagas/t-read", headers=bearer("carol"))
    unknown = harness.client.get("/sagacity/sagas/t-nothing", headers=bearer("carol"))
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["detail"] == unknown.json()["detail"].replace("t-nothing", "t-read")
    assert (
        harness.client.get(f"/sagacity/approvals/t-read/{seq}", headers=bearer("carol")).status_code
        == 403
    )
    # eve decides the hold, a tool of this saga: she reads it (and decides nothing else).
    assert harness.client.get("/sagacity/sagas/t-read", headers=bearer("eve")).status_code == 200
    # The auditor reads the saga and the request, lists everything, and decides nothing.
    audit = bearer("audit")
    saga = harness.client.get("/sagacity/sagas/t-read", headers=audit)
    assert saga.status_code == 200
    assert [e["event_type"] for e in saga.json()["entries"]] == harness.kinds("t-read")
    assert harness.client.get(f"/sagacity/approvals/t-read/{seq}", headers=audit).status_code == 200
    listed = harness.client.get("/sagacity/approvals", headers=audit).json()["requests"]
    assert [(r["saga_id"], r["seq"]) for r in listed] == [("t-read", seq)]
    approve = harness.client.post(
        f"/sagacity/approve/t-read/{seq}", json=harness.shown("t-read", seq), headers=audit
    )
    assert approve.status_code == 403
    assert harness.entries("t-read", E.APPROVED) == []


def test_the_cli_goes_through_the_same_rule(live: LiveService) -> None:
    from .test_cli import cli

    with calling_as(AGENT):
        seq = live.gate("cli-own")
    bound = cli(live, "dave", "approve", "cli-own", str(seq))
    assert bound.exit_code == 1  # type: ignore[attr-defined]
    assert "nobody decides their own request" in bound.output  # type: ignore[attr-defined]
    agent = cli(live, "agent", "approve", "cli-own", str(seq))
    assert agent.exit_code == 1  # type: ignore[attr-defined]
    assert "agent principal" in agent.output  # type: ignore[attr-defined]
    assert [e for e in live.journal.entries("cli-own") if e.event_type is E.APPROVED] == []
    approved = cli(live, "alice", "approve", "cli-own", str(seq))
    assert approved.exit_code == 0, approved.output  # type: ignore[attr-defined]
