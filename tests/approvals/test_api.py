"""The HTTP API in process, on the in-memory journal and a real PostgreSQL working table."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sagacity import EventType, InMemoryJournal, Sagacity, SagaStatus, compose
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.consumers.approvals._api_limits import INSECURE_HEADER
from sagacity.schemas import decode_entry

from .conftest import ALICE, MALLORY, bearer, principal_entry
from .tools import Bank, StrictBank, calls

pytestmark = pytest.mark.postgres


def wires(log: Path) -> list[dict[str, str]]:
    """The wire transfers that ran."""
    return [c for c in calls(log) if c["tool"] == "send_wire_transfer"]


E = EventType


class Harness:
    """An agent and an approvals server sharing one in-memory journal."""

    def __init__(self, pg_dsn: str, auth_file: Path | None, log: Path, **settings: Any) -> None:
        self.journal = InMemoryJournal()
        self.log = log
        self.agent = Sagacity(self.journal, compensation="delegated", writer_id="agent")
        self.bank = self.agent.wrap(Bank())
        tools = settings.pop("tools", [Bank()])
        self.settings = ApprovalsSettings(
            database_url=pg_dsn,
            auth_file=str(auth_file) if auth_file else None,
            insecure_dev=auth_file is None,
            sweep_interval_s=settings.pop("sweep_interval_s", 3600),
            **settings,
        )
        self.server = ApprovalsServer(
            self.settings,
            dependencies=compose.approvals_on(self.journal, self.settings),
            consume=False,
            tools=tools,
        )
        self.client = TestClient(self.server.app)

    def gate(self, saga_id: str, *, privileged: bool = False) -> int:
        def work() -> None:
            self.bank.reserve_inventory("SKU-9")
            if privileged:
                self.bank.grant_agent_access("agent-7", "operator")
            else:
                self.bank.send_wire_transfer("100", "alice")

        result = self.agent.saga(saga_id, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        # What the consumer group does on Kafka: fold the new events into the table.
        self.server.service.materialise(saga_id)
        return result.awaiting_seq

    def shown(self, saga_id: str, seq: int) -> dict[str, str]:
        """The approve body naming the request an approver is shown (the chain's)."""
        entries = self.journal.entries(saga_id)
        return {"request_hash": entries[seq - 1].hash} if len(entries) >= seq else {}

    def kinds(self, saga_id: str) -> list[str]:
        return [e.event_type.value for e in self.journal.entries(saga_id)]

    def entries(self, saga_id: str, kind: EventType) -> list[Any]:
        return [e for e in self.journal.entries(saga_id) if e.event_type is kind]


@pytest.fixture
def harness(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(log))
    h = Harness(pg_dsn, auth_file, log)
    with h.client:
        yield h


def test_three_step_flow_journals_the_authenticated_approver(harness: Harness) -> None:
    seq = harness.gate("t-77")
    listed = harness.client.get("/sagacity/approvals", headers=bearer("alice"))
    assert listed.status_code == 200
    [request] = listed.json()["requests"]
    assert (request["saga_id"], request["seq"], request["payload"]) == ("t-77", seq, ALICE)
    assert request["state"] == "pending"
    approved = harness.client.post(
        f"/sagacity/approve/t-77/{seq}", json=harness.shown("t-77", seq), headers=bearer("alice")
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["request"]["state"] == "approved"
    [decision] = harness.entries("t-77", E.APPROVED)
    assert decision.actor == "alice@example.com"
    assert decision.attributes["policy_version"] == "1"
    resumed = harness.client.post(
        f"/sagacity/resume/t-77/{seq}", json={"payload": ALICE}, headers=bearer("alice")
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["saga_status"] == "COMPLETED"
    assert resumed.json()["value"] == "transfer-ok"
    assert resumed.json()["request"]["state"] == "resumed"
    assert harness.kinds("t-77")[-4:] == ["APPROVED", "INTENT", "EXECUTED", "SAGA_ENDED"]
    [_, resumed_intent] = harness.entries("t-77", E.INTENT)
    assert resumed_intent.attributes["requested_by"] == "alice@example.com"
    wires = [c for c in calls(harness.log) if c["tool"] == "send_wire_transfer"]
    assert wires == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]
    saga = harness.client.get("/sagacity/sagas/t-77", headers=bearer("alice")).json()
    assert saga["status"] == "COMPLETED"
    assert saga["verified"] is True
    assert [e["event_type"] for e in saga["entries"]] == harness.kinds("t-77")


def test_stale_approval_attack_is_refused_journaled_and_handed_to_compensation(
    harness: Harness,
) -> None:
    seq = harness.gate("t-stale")
    assert harness.client.post(
        f"/sagacity/approve/t-stale/{seq}",
        json=harness.shown("t-stale", seq),
        headers=bearer("alice"),
    ).is_success
    refused = harness.client.post(
        f"/sagacity/resume/t-stale/{seq}", json={"payload": MALLORY}, headers=bearer("alice")
    )
    assert refused.status_code == 409
    assert refused.json()["detail"] == "payload changed since approval"
    [refusal] = harness.entries("t-stale", E.RESUME_REFUSED)
    assert refusal.payload == MALLORY
    # who attempted the stale resume is on the chain: the authenticated principal
    assert refusal.attributes["requested_by"] == "alice@example.com"
    [handoff] = harness.entries("t-stale", E.COMPENSATION_REQUESTED)
    assert handoff.attributes["reason"] == "RESUME_REFUSED"
    assert wires(harness.log) == []
    again = harness.client.post(
        f"/sagacity/resume/t-stale/{seq}", json={"payload": ALICE}, headers=bearer("alice")
    )
    assert again.status_code == 409
    row = harness.client.get(f"/sagacity/approvals/t-stale/{seq}", headers=bearer("alice"))
    assert row.json()["state"] == "refused"


def test_whitespace_reformat_no_approval_and_unknown(harness: Harness) -> None:
    seq = harness.gate("t-ws")
    none = harness.client.post(
        f"/sagacity/resume/t-ws/{seq}", json={"payload": ALICE}, headers=bearer("alice")
    )
    assert (none.status_code, none.json()["detail"]) == (409, "no human approval recorded")
    assert harness.entries("t-ws", E.INTENT)[-1].tool == "reserve_inventory"
    harness.client.post(
        f"/sagacity/approve/t-ws/{seq}", json=harness.shown("t-ws", seq), headers=bearer("alice")
    )
    reformatted = harness.client.post(
        f"/sagacity/resume/t-ws/{seq}",
        json={"payload": '{ "amount": "100", "to": "alice" }'},
        headers=bearer("alice"),
    )
    assert (reformatted.status_code, reformatted.json()["detail"]) == (
        409,
        "payload changed since approval",
    )
    for path in ("/sagacity/approve/nope/3", f"/sagacity/approve/t-ws/{seq + 40}"):
        assert harness.client.post(path, headers=bearer("alice")).status_code == 404
    assert (
        harness.client.get("/sagacity/approvals/nope/1", headers=bearer("alice")).status_code == 404
    )
    assert harness.client.get("/sagacity/sagas/nope", headers=bearer("alice")).status_code == 404
    assert wires(harness.log) == []


def test_two_signatures_from_distinct_principals(harness: Harness) -> None:
    seq = harness.gate("t-priv", privileged=True)
    first = harness.client.post(
        f"/sagacity/approve/t-priv/{seq}",
        json=harness.shown("t-priv", seq),
        headers=bearer("alice"),
    )
    assert first.status_code == 200
    assert first.json()["request"]["state"] == "pending"
    twice = harness.client.post(
        f"/sagacity/approve/t-priv/{seq}",
        json=harness.shown("t-priv", seq),
        headers=bearer("alice"),
    )
    assert twice.status_code == 409
    assert twice.json()["detail"] == "alice@example.com already signed this request"
    early = harness.client.post(
        f"/sagacity/resume/t-priv/{seq}",
        json={"payload": '{"principal":"agent-7","role":"operator"}'},
        headers=bearer("alice"),
    )
    assert early.status_code == 409
    assert "only 1 of 2 required signatures" in early.json()["detail"]
    second = harness.client.post(
        f"/sagacity/approve/t-priv/{seq}",
        json=harness.shown("t-priv", seq),
        headers=bearer("carol"),
    )
    assert second.status_code == 200
    assert second.json()["request"]["state"] == "approved"
    assert second.json()["request"]["signed_by"] == ["alice@example.com", "carol@example.com"]
    third = harness.client.post(
        f"/sagacity/approve/t-priv/{seq}", json=harness.shown("t-priv", seq), headers=bearer("bob")
    )
    assert third.status_code == 409
    assert len(harness.entries("t-priv", E.APPROVED)) == 2
    done = harness.client.post(
        f"/sagacity/resume/t-priv/{seq}",
        json={"payload": '{"principal":"agent-7","role":"operator"}'},
        headers=bearer("carol"),
    )
    assert done.status_code == 200, done.text
    assert done.json()["value"] == "granted operator"


def test_401_without_or_with_a_bad_token_and_403_for_another_tool(harness: Harness) -> None:
    seq = harness.gate("t-auth")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"}):
        answer = harness.client.post(
            f"/sagacity/approve/t-auth/{seq}", json=harness.shown("t-auth", seq), headers=headers
        )
        assert answer.status_code == 401, headers
        assert answer.headers["www-authenticate"] == "Bearer"
    assert harness.client.get("/sagacity/approvals").status_code == 401
    forbidden = harness.client.post(
        f"/sagacity/approve/t-auth/{seq}", json=harness.shown("t-auth", seq), headers=bearer("eve")
    )
    assert forbidden.status_code == 403
    assert (
        harness.client.post(f"/sagacity/reject/t-auth/{seq}", headers=bearer("carol")).status_code
        == 403
    )
    assert harness.client.get("/sagacity/approvals", headers=bearer("eve")).json() == {
        "requests": []
    }
    spoofed = harness.client.post(
        f"/sagacity/approve/t-auth/{seq}",
        json={"approver": "bob@example.com"},
        headers=bearer("alice"),
    )
    assert spoofed.status_code == 403
    assert "authenticated principal" in spoofed.json()["detail"]
    assert harness.entries("t-auth", E.APPROVED) == []


def test_reject_hands_off_and_closes_and_replays_are_409(harness: Harness) -> None:
    seq = harness.gate("t-rej")
    rejected = harness.client.post(
        f"/sagacity/reject/t-rej/{seq}", json={"reason": "wrong account"}, headers=bearer("bob")
    )
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["saga_status"] == "COMPENSATION_PENDING"
    [rejection] = harness.entries("t-rej", E.REJECTED)
    assert (rejection.actor, rejection.error) == ("bob@example.com", "wrong account")
    assert harness.entries("t-rej", E.COMPENSATION_REQUESTED)[0].attributes["reason"] == "REJECTED"
    for path, body in (
        (f"/sagacity/reject/t-rej/{seq}", None),
        (f"/sagacity/approve/t-rej/{seq}", harness.shown("t-rej", seq)),
    ):
        assert harness.client.post(path, json=body, headers=bearer("bob")).status_code == 409
    assert len(harness.entries("t-rej", E.REJECTED)) == 1
    assert harness.client.get("/sagacity/approvals", headers=bearer("bob")).json()["requests"] == []


def test_double_click_and_approve_racing_reject_decide_once(harness: Harness) -> None:
    seqs = {s: harness.gate(s) for s in ("t-dbl", "t-race")}
    statuses: dict[str, list[int]] = {"t-dbl": [], "t-race": []}
    barrier = threading.Barrier(4)

    def hit(saga: str, action: str) -> None:
        barrier.wait()
        body = harness.shown(saga, seqs[saga]) if action == "approve" else None
        answer = harness.client.post(
            f"/sagacity/{action}/{saga}/{seqs[saga]}", json=body, headers=bearer("bob")
        )
        statuses[saga].append(answer.status_code)

    threads = [
        threading.Thread(target=hit, args=args)
        for args in (
            ("t-dbl", "approve"),
            ("t-dbl", "approve"),
            ("t-race", "approve"),
            ("t-race", "reject"),
        )
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses["t-dbl"]) == [200, 409]
    assert len(harness.entries("t-dbl", E.APPROVED)) == 1
    assert sorted(statuses["t-race"]) == [200, 409]
    decisions = harness.entries("t-race", E.APPROVED) + harness.entries("t-race", E.REJECTED)
    assert len(decisions) == 1


def test_constraint_of_the_policy_in_force_overrides_the_approval(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(log))
    h = Harness(pg_dsn, auth_file, log, tools=[StrictBank()], policy_version="2")
    with h.client:

        def work() -> None:
            h.bank.send_wire_transfer("50000", "alice")

        seq = h.agent.saga("t-policy", work).awaiting_seq
        assert seq is not None
        h.server.service.materialise("t-policy")
        assert h.client.post(
            f"/sagacity/approve/t-policy/{seq}",
            json=h.shown("t-policy", seq),
            headers=bearer("bob"),
        ).is_success
        refused = h.client.post(
            f"/sagacity/resume/t-policy/{seq}",
            json={"payload": '{"amount":"50000","to":"alice"}'},
            headers=bearer("bob"),
        )
        assert refused.status_code == 409
        assert "treasury mandate" in refused.json()["detail"]
        [request] = h.entries("t-policy", E.AWAITING_APPROVAL)
        [approval] = h.entries("t-policy", E.APPROVED)
        [violation] = h.entries("t-policy", E.CONSTRAINT_VIOLATED)
        assert request.attributes["policy_version"] == "1"
        assert approval.attributes["policy_version"] == "2"
        assert violation.attributes["policy_version"] == "2"
        assert wires(log) == []


def test_expiry_sweep_journals_expired_and_hands_off(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    h = Harness(pg_dsn, auth_file, log, approval_ttl_s=0.3, sweep_interval_s=0.1)
    with h.client:
        seq = h.gate("t-exp")
        assert h.client.get(f"/sagacity/approvals/t-exp/{seq}", headers=bearer("bob")).is_success
        deadline = __import__("time").monotonic() + 10
        # The sweep appends EXPIRED, then the hand-off: wait for both, not the first alone.
        while not h.entries("t-exp", E.COMPENSATION_REQUESTED):
            assert __import__("time").monotonic() < deadline, "the sweep did not hand off"
            __import__("time").sleep(0.05)
        [expired] = h.entries("t-exp", E.EXPIRED)
        assert expired.ref_seq == seq
        assert h.entries("t-exp", E.COMPENSATION_REQUESTED)[0].attributes["reason"] == "EXPIRED"
        late = h.client.post(
            f"/sagacity/approve/t-exp/{seq}", json=h.shown("t-exp", seq), headers=bearer("bob")
        )
        assert late.status_code == 409
        assert len(h.entries("t-exp", E.EXPIRED)) == 1
        assert (
            h.client.get(f"/sagacity/approvals/t-exp/{seq}", headers=bearer("bob")).json()["state"]
            == "expired"
        )


def test_an_expired_request_cannot_be_approved(
    pg_dsn: str, auth_file: Path, tmp_path: Path
) -> None:
    h = Harness(pg_dsn, auth_file, tmp_path / "calls.jsonl", approval_ttl_s=0.2)
    with h.client:
        seq = h.gate("t-late")
        __import__("time").sleep(0.3)
        late = h.client.post(
            f"/sagacity/approve/t-late/{seq}", json=h.shown("t-late", seq), headers=bearer("bob")
        )
        assert late.status_code == 409
        assert "expired" in late.json()["detail"]
        assert len(h.entries("t-late", E.EXPIRED)) == 1
        assert h.entries("t-late", E.APPROVED) == []


def test_insecure_dev_takes_the_body_name_and_says_so_on_every_response(
    pg_dsn: str, tmp_path: Path
) -> None:
    h = Harness(pg_dsn, None, tmp_path / "calls.jsonl")
    with h.client:
        seq = h.gate("t-dev")
        for answer in (
            h.client.get("/sagacity/approvals"),
            h.client.post(f"/sagacity/approve/t-dev/{seq}"),
            h.client.get("/openapi.json"),
            h.client.get("/metrics"),
        ):
            assert "NOT authenticated" in answer.headers[INSECURE_HEADER]
        ok = h.client.post(f"/sagacity/approve/t-dev/{seq}", json={"approver": "dana"})
        assert ok.status_code == 200
        assert h.entries("t-dev", E.APPROVED)[0].actor == "dana"


def test_insecure_dev_resume_naming_nobody_is_the_approver_on_record_or_anonymous(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    h = Harness(pg_dsn, None, tmp_path / "calls.jsonl")
    with h.client:
        early = h.gate("t-dev-early")
        refused = h.client.post(f"/sagacity/resume/t-dev-early/{early}", json={"payload": ALICE})
        assert (refused.status_code, refused.json()["detail"]) == (
            409,
            "no human approval recorded",
        )
        assert h.kinds("t-dev-early")[-1] == "SAGA_ENDED"  # refused, still pending

        seq = h.gate("t-dev-seed")
        approver = {"approver": "manager@company.com"}
        assert h.client.post(f"/sagacity/approve/t-dev-seed/{seq}", json=approver).is_success
        ran = h.client.post(f"/sagacity/resume/t-dev-seed/{seq}", json={"payload": ALICE})
        assert ran.status_code == 200, ran.text
        assert ran.json()["saga_status"] == "COMPLETED"
        [intent] = [e for e in h.entries("t-dev-seed", E.INTENT) if e.tool == "send_wire_transfer"]
        assert intent.attributes["requested_by"] == "manager@company.com"
        assert wires(h.log) == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]

        named = h.gate("t-dev-named")
        assert h.client.post(f"/sagacity/approve/t-dev-named/{named}", json=approver).is_success
        body = {"payload": ALICE, "approver": "ops@company.com"}  # a name given is the requester
        assert h.client.post(f"/sagacity/resume/t-dev-named/{named}", json=body).is_success
        [intent] = [e for e in h.entries("t-dev-named", E.INTENT) if e.tool == "send_wire_transfer"]
        assert intent.attributes["requested_by"] == "ops@company.com"


@pytest.mark.parametrize(
    ("path", "body", "content"),
    [
        ("/sagacity/resume/t-bad/{seq}", {"payload": 42}, None),
        ("/sagacity/resume/t-bad/{seq}", {"payload": None}, None),
        ("/sagacity/resume/t-bad/{seq}", {}, None),
        ("/sagacity/resume/t-bad/{seq}", {"payload": ALICE, "extra": 1}, None),
        ("/sagacity/resume/t-bad/{seq}", None, b'{"payload": "\xff\xfe"}'),
        ("/sagacity/resume/t-bad/{seq}", None, b'{"payload": "\\ud800"}'),
        ("/sagacity/resume/t-bad/{seq}", None, b'{"payload": "a\\u0000b"}'),
        ("/sagacity/resume/t-bad/{seq}", None, b"not json"),
        ("/sagacity/reject/t-bad/{seq}", {"reason": ["x"]}, None),
        ("/sagacity/approve/t-bad/{seq}", {"approver": 7}, None),
        ("/sagacity/approve/t-bad/abc", None, None),
        ("/sagacity/approve/t-bad/0", None, None),
        ("/sagacity/approve/t-bad/-1", None, None),
        ("/sagacity/approve/t-bad/99999999999999", None, None),
        ("/sagacity/approve/..%2F..%2Fetc/1", None, None),
        ("/sagacity/approve/.hidden/1", None, None),
        ("/sagacity/approve/a%20b/1", None, None),
    ],
)
def test_bad_input_is_refused_without_journaling(
    harness: Harness, path: str, body: Any, content: bytes | None
) -> None:
    seq = harness.gate("t-bad")
    before = harness.kinds("t-bad")
    url = path.format(seq=seq)
    headers = {**bearer("bob"), "Content-Type": "application/json"}
    if content is not None:
        answer = harness.client.post(url, content=content, headers=headers)
    else:
        answer = harness.client.post(url, json=body, headers=headers)
    assert answer.status_code in (404, 422), answer.text
    if "%2F" not in path:
        assert answer.status_code == 422, answer.text
    assert isinstance(answer.json()["detail"], str)
    assert harness.kinds("t-bad") == before


def test_a_huge_body_is_413(harness: Harness) -> None:
    seq = harness.gate("t-huge")
    huge = {"payload": "x" * (300 * 1024)}
    answer = harness.client.post(f"/sagacity/resume/t-huge/{seq}", json=huge, headers=bearer("bob"))
    assert answer.status_code == 413
    assert harness.entries("t-huge", E.RESUME_REFUSED) == []


def _auth_text(names: list[str], *, broken: bool = False) -> str:
    text = "\n".join(principal_entry(n) for n in names)
    return text + ("\n[[principals]\n" if broken else "")


def test_a_revoked_token_is_refused_without_a_restart_and_a_broken_edit_fails_closed(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sagacity.consumers.approvals._auth.CHECK_INTERVAL_S", 0.0)
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    h = Harness(pg_dsn, auth_file, tmp_path / "calls.jsonl")
    with h.client:
        seq = h.gate("t-revoke")
        assert h.client.get("/sagacity/approvals", headers=bearer("alice")).status_code == 200
        # Alice's token is revoked; the others stay.
        auth_file.write_text(_auth_text(["bob", "carol", "eve"]))
        refused = h.client.post(
            f"/sagacity/approve/t-revoke/{seq}",
            json=h.shown("t-revoke", seq),
            headers=bearer("alice"),
        )
        assert refused.status_code == 401
        assert h.entries("t-revoke", E.APPROVED) == []
        # An edit that does not parse refuses every decision (503, nothing journaled) and shows
        # on /healthz and /metrics until the file is fixed.
        auth_file.write_text(_auth_text(["bob", "carol", "eve"], broken=True))
        broken = h.client.post(
            f"/sagacity/approve/t-revoke/{seq}",
            json=h.shown("t-revoke", seq),
            headers=bearer("bob"),
        )
        assert broken.status_code == 503
        assert "auth file loads again" in broken.json()["detail"]
        assert h.entries("t-revoke", E.APPROVED) == []
        assert h.client.get("/healthz").status_code == 503
        metrics = h.client.get("/metrics").text
        assert "sagacity_approvals_auth_file_ok 0.0" in metrics
        assert 'sagacity_approvals_auth_reloads_total{outcome="failed"} 1.0' in metrics
        auth_file.write_text(_auth_text(["bob", "carol", "eve"]))
        approved = h.client.post(
            f"/sagacity/approve/t-revoke/{seq}",
            json=h.shown("t-revoke", seq),
            headers=bearer("bob"),
        )
        assert approved.status_code == 200
        assert [e.actor for e in h.entries("t-revoke", E.APPROVED)] == ["bob@example.com"]
        assert h.client.get("/healthz").status_code == 200
        assert "sagacity_approvals_auth_file_ok 1.0" in h.client.get("/metrics").text


def test_stats_and_metrics_cover_request_to_decision(harness: Harness) -> None:
    seq = {saga: harness.gate(saga) for saga in ("m-1", "m-2", "m-3")}
    for action, saga in (("approve", "m-1"), ("approve", "m-2"), ("reject", "m-3")):
        body = harness.shown(saga, seq[saga]) if action == "approve" else None
        answer = harness.client.post(
            f"/sagacity/{action}/{saga}/{seq[saga]}", json=body, headers=bearer("bob")
        )
        assert answer.status_code == 200
    stats = harness.client.get("/sagacity/stats", headers=bearer("bob")).json()
    assert (stats["approved"], stats["rejected"], stats["pending"]) == (2, 1, 2)
    assert stats["approve_ratio"] == pytest.approx(2 / 3)
    assert 0 < stats["latency_p50_s"] <= stats["latency_p95_s"] < 60
    assert "not time to first look" in stats["latency_covers"]
    metrics = harness.client.get("/metrics").text
    assert 'sagacity_approvals_decisions{decision="approved"} 2.0' in metrics
    assert "sagacity_approvals_approve_ratio 0.666" in metrics
    assert 'sagacity_approvals_decision_latency_seconds{quantile="0.95"}' in metrics
    assert harness.client.get("/healthz").json()["ok"] is True


def test_a_tool_that_fails_on_resume_is_journaled_and_handed_to_compensation(
    harness: Harness,
) -> None:
    def work() -> None:
        harness.bank.reserve_inventory("SKU-9")
        harness.bank.send_wire_transfer("100", "bounce")

    seq = harness.agent.saga("t-fail", work).awaiting_seq
    assert seq is not None
    harness.server.service.materialise("t-fail")
    assert harness.client.post(
        f"/sagacity/approve/t-fail/{seq}", json=harness.shown("t-fail", seq), headers=bearer("bob")
    ).is_success
    answer = harness.client.post(
        f"/sagacity/resume/t-fail/{seq}",
        json={"payload": '{"amount":"100","to":"bounce"}'},
        headers=bearer("bob"),
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["saga_status"] == "COMPENSATION_PENDING"
    assert "ConnectionError: the bank refused the transfer" in answer.json()["error"]
    assert harness.kinds("t-fail")[-5:] == [
        "APPROVED",
        "INTENT",
        "FAILED",
        "COMPENSATION_REQUESTED",
        "SAGA_ENDED",
    ]
    assert harness.entries("t-fail", E.COMPENSATION_REQUESTED)[0].attributes["reason"] == "FAILED"
    assert answer.json()["request"]["state"] == "resumed"


@pytest.mark.kafka
def test_a_consumer_whose_database_is_not_ready_retries_and_folds_everything(
    postgres_dsn: str, kafka_bootstrap: str, make_topic: Any
) -> None:
    import time
    import uuid

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from sagacity.consumers.approvals import RequestConsumer
    from sagacity.postgres import PostgresRequestStore as ApprovalStore
    from sagacity.producer import KafkaConsumers, KafkaJournal

    schema = f"late_{uuid.uuid4().hex[:12]}"
    params = conninfo_to_dict(postgres_dsn)
    params["options"] = f"-c search_path={schema}"
    topic = make_topic(partitions=2)
    store = ApprovalStore(make_conninfo(**params), topic=topic)
    with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
        agent = Sagacity(journal, compensation="delegated")
        bank = agent.wrap(Bank())
        agent.saga("c-1", lambda: bank.send_wire_transfer("1", "a"))
        consumer = RequestConsumer(
            store,
            consumers=KafkaConsumers(),
            bootstrap_servers=kafka_bootstrap,
            topic=topic,
            decode=decode_entry,
        )
        consumer.start()
        try:
            deadline = time.monotonic() + 30
            while consumer.error is None:  # no schema, no tables: every batch fails
                assert time.monotonic() < deadline, "no failure seen"
                time.sleep(0.05)
            assert consumer.alive
            assert consumer.applied == 0
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            store.migrate()
            agent.saga("c-2", lambda: bank.send_wire_transfer("2", "b"))
            while {r.saga_id for r in store.requests()} != {"c-1", "c-2"}:
                assert time.monotonic() < deadline + 30, "not folded"
                time.sleep(0.1)
            consumer.stop()
            assert consumer.error is None
            # Every event of the topic folded exactly once, its position stored with it.
            assert sum(store.offsets(topic).values()) == consumer.applied
        finally:
            consumer.stop()
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_forged_approval_does_not_block_a_rejection(
    pg_dsn: str, auth_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagacity import EntryDraft
    from sagacity.signing._decision_signature import generate_key

    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    generate_key(tmp_path / "approvals.pem")
    h = Harness(
        pg_dsn, auth_file, tmp_path / "calls.jsonl", signing_key=str(tmp_path / "approvals.pem")
    )
    with h.client:
        seq = h.gate("t-veto")
        [request] = h.agent.pending_approvals("t-veto")
        h.journal.append(
            EntryDraft(
                saga_id="t-veto",
                event_type=E.APPROVED,
                tool=request.tool,
                actor="carol@example.com",
                attributes={"ref_seq": str(seq), "payload_sha256": request.payload_sha256 or ""},
            )
        )
        h.server.service.materialise("t-veto")
        vetoed = h.client.post(
            f"/sagacity/reject/t-veto/{seq}", json={"reason": "no"}, headers=bearer("bob")
        )
        assert vetoed.status_code == 200, vetoed.text
        [rejection] = h.entries("t-veto", E.REJECTED)
        assert rejection.attributes["decision_signature"].startswith("SGCD3:")
