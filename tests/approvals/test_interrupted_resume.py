"""A resume interrupted by a crash is finished by a retried resume, never by calling the tool
again (real Kafka and PostgreSQL).

The crash is the approvals process dying after the resumed call's ``INTENT`` (and, in the first
case, its ``EXECUTED``) reached the topic and before ``SAGA_ENDED``: those events are written
with the journal's own API, exactly as the resume journals them, and then the resume is retried
through the HTTP API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sagacity import EventType, Sagacity, SagaStatus, compose
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.producer import KafkaJournal
from sagacity.signing._decision_signature import generate_key
from sagacity.tools._tool import executed_draft, failed_draft, intent_draft

from .conftest import ALICE, MALLORY, bearer
from .tools import Bank, calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

E = EventType


class Gate:
    """An agent and an approvals service on one real topic and a real working table."""

    def __init__(self, bootstrap: str, topic: str, dsn: str, auth_file: Path, tmp: Path) -> None:
        key = generate_key(tmp / "approvals.pem")
        self.agent_journal = KafkaJournal(bootstrap, topic=topic)
        self.agent = Sagacity(
            self.agent_journal,
            compensation="delegated",
            writer_id="agent",
            approvals_public_key=key.public_hex,
        )
        self.bank = self.agent.wrap(Bank())
        self.journal = KafkaJournal(bootstrap, topic=topic, writer_id="approvals")
        settings = ApprovalsSettings(
            database_url=dsn,
            bootstrap_servers=bootstrap,
            topic=topic,
            auth_file=str(auth_file),
            signing_key=str(tmp / "approvals.pem"),
            sweep_interval_s=3600,
        )
        self.server = ApprovalsServer(
            settings,
            dependencies=compose.approvals_on(self.journal, settings),
            consume=False,
            tools=[Bank()],
        )
        self.server.store.migrate()
        self.client = TestClient(self.server.app)

    def close(self) -> None:
        self.journal.close()
        self.agent_journal.close()

    def approved(self, saga_id: str) -> int:
        """Run a saga to its wire's request and approve it; returns the request's seq."""

        def work() -> None:
            self.bank.reserve_inventory("SKU-9")
            self.bank.send_wire_transfer("100", "alice")

        result = self.agent.saga(saga_id, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        self.server.service.materialise(saga_id)
        request = self.journal.entries(saga_id)[result.awaiting_seq - 1]
        approved = self.client.post(
            f"/sagacity/approve/{saga_id}/{result.awaiting_seq}",
            json={"request_hash": request.hash},
            headers=bearer("alice"),
        )
        assert approved.status_code == 200, approved.text
        return result.awaiting_seq

    def crash_after(self, saga_id: str, seq: int, *, outcome: str | None) -> None:
        """Journal what the resume journals before the process dies: the ``INTENT`` of the
        approved call and its ``outcome`` (``"executed"``, ``"failed"`` or none); no
        ``SAGA_ENDED``."""
        s = self.server.sagacity
        tool = s.registry.get("send_wire_transfer")
        assert tool is not None
        tail = self.journal.entries(saga_id)[-1].seq
        intent = self.journal.append_after(
            intent_draft(s, tool.definition, saga_id, ALICE, seq), after_seq=tail
        )
        if outcome == "executed":
            self.journal.append(executed_draft(s, tool.definition, intent, "transfer-ok"))
        elif outcome == "failed":
            refused = ConnectionError("the bank refused the transfer")
            self.journal.append(failed_draft(s, tool.definition, intent, refused))
        self.journal.flush()

    def resume(self, saga_id: str, seq: int, payload: str = ALICE) -> Any:
        return self.client.post(
            f"/sagacity/resume/{saga_id}/{seq}", json={"payload": payload}, headers=bearer("alice")
        )

    def kinds(self, saga_id: str) -> list[str]:
        return [e.event_type.value for e in self.agent_journal.read(saga_id).entries]


@pytest.fixture
def gate(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Gate]:
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    g = Gate(kafka_bootstrap, make_topic(partitions=1), pg_dsn, auth_file, tmp_path)
    try:
        yield g
    finally:
        g.close()


def wires(tmp_path: Path) -> list[dict[str, str]]:
    return [c for c in calls(tmp_path / "calls.jsonl") if c["tool"] == "send_wire_transfer"]


def test_a_retried_resume_after_executed_ends_the_saga_without_calling_again(
    gate: Gate, tmp_path: Path
) -> None:
    seq = gate.approved("crash-executed")
    gate.crash_after("crash-executed", seq, outcome="executed")

    resumed = gate.resume("crash-executed", seq)

    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["saga_status"] == "COMPLETED"
    assert resumed.json()["value"] == "transfer-ok"
    assert resumed.json()["request"]["state"] == "resumed"
    assert gate.kinds("crash-executed")[-4:] == ["APPROVED", "INTENT", "EXECUTED", "SAGA_ENDED"]
    entries = gate.agent_journal.read("crash-executed").entries
    assert len([e for e in entries if e.event_type is E.INTENT and e.ref_seq == seq]) == 1
    assert entries[-1].result == "COMPLETED"
    assert wires(tmp_path) == []  # the tool ran before the crash, not here
    outcome = gate.agent.outcome("crash-executed")
    assert outcome is not None
    assert outcome.status is SagaStatus.COMPLETED
    # Once ended, a further resume is refused as before.
    again = gate.resume("crash-executed", seq)
    assert again.status_code == 409
    assert "already resumed" in again.json()["detail"]


def test_a_retried_resume_after_failed_hands_the_saga_to_compensation(
    gate: Gate, tmp_path: Path
) -> None:
    seq = gate.approved("crash-failed")
    gate.crash_after("crash-failed", seq, outcome="failed")

    resumed = gate.resume("crash-failed", seq)

    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["saga_status"] == "COMPENSATION_PENDING"
    assert "the bank refused the transfer" in resumed.json()["error"]
    assert gate.kinds("crash-failed")[-5:] == [
        "APPROVED",
        "INTENT",
        "FAILED",
        "COMPENSATION_REQUESTED",
        "SAGA_ENDED",
    ]
    assert wires(tmp_path) == []


def test_a_retried_resume_with_another_payload_finishes_nothing(gate: Gate, tmp_path: Path) -> None:
    seq = gate.approved("crash-other-payload")
    gate.crash_after("crash-other-payload", seq, outcome="executed")
    before = gate.kinds("crash-other-payload")

    refused = gate.resume("crash-other-payload", seq, MALLORY)

    assert refused.status_code == 409
    # The refusal and its reason (the error's detail), as every error prints them.
    assert refused.json()["detail"] == (
        "payload changed since approval: the resume started at seq 7 ran the approved payload; "
        "nothing was journaled for this attempt"
    )
    assert gate.kinds("crash-other-payload") == before
    assert wires(tmp_path) == []
    # The approved payload still finishes it.
    assert gate.resume("crash-other-payload", seq).json()["saga_status"] == "COMPLETED"


def test_a_retried_resume_of_an_intent_without_outcome_does_not_call_the_tool(
    gate: Gate, tmp_path: Path
) -> None:
    seq = gate.approved("crash-in-doubt")
    gate.crash_after("crash-in-doubt", seq, outcome=None)

    resumed = gate.resume("crash-in-doubt", seq)

    assert resumed.status_code == 409
    detail = resumed.json()["detail"]
    assert "in doubt" in detail
    assert "SUSPECT" in detail
    assert "not run again" in detail
    assert wires(tmp_path) == []
    entries = gate.agent_journal.read("crash-in-doubt").entries
    [intent] = [e for e in entries if e.event_type is E.INTENT and e.ref_seq == seq]
    assert [e.event_type.value for e in entries if e.seq > intent.seq] == [
        "SUSPECT",
        "COMPENSATION_REQUESTED",
        "SAGA_ENDED",
    ]
    suspect = entries[intent.seq]
    assert suspect.ref_seq == intent.seq
    assert suspect.attributes["phase"] == "call"
    handoff = entries[intent.seq + 1]
    assert handoff.attributes["reason"] == "SUSPECT"
    assert entries[-1].result == "COMPENSATION_PENDING"
    # Asked again, the answer is the same refusal and nothing more is journaled.
    again = gate.resume("crash-in-doubt", seq)
    assert again.status_code == 409
    assert len(gate.agent_journal.read("crash-in-doubt").entries) == len(entries)
    assert wires(tmp_path) == []
