"""The design card's curl flow (its approval-gates page), replayed as written against
``sagacity serve approvals --insecure-dev`` on real Kafka and PostgreSQL.

The commands below are the card's, byte for byte; only the address (the card's
``localhost:8080``) and the request's seq are put in: the card's journal numbers the request 3,
a Sagacity chain starts with ``SAGA_OPENED`` and puts it where the agent reached the gate.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import EventType, Sagacity, SagaStatus
from sagacity.producer import KafkaJournal

from ._process import Replica
from .conftest import ALICE
from .tools import Bank, calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType

SEE_PENDING = r"""curl localhost:8080/sagacity/approvals"""
APPROVE = r"""curl -X POST localhost:8080/sagacity/approve/transfer-77/3 \
  -H 'Content-Type: application/json' \
  -d '{"approver":"manager@company.com"}'"""
RESUME = r"""curl -X POST localhost:8080/sagacity/resume/transfer-77/3 \
  -H 'Content-Type: application/json' \
  -d '{"payload":"{\"amount\":\"100\",\"to\":\"alice\"}"}'"""
REJECT = r"""curl -X POST localhost:8080/sagacity/reject/transfer-77/3 \
  -H 'Content-Type: application/json' \
  -d '{"approver":"manager@company.com"}'"""


class Card:
    """An agent on a fresh topic, gated at ``transfer-77``, and an insecure-dev service."""

    def __init__(self, bootstrap: str, topic: str, dsn: str, tmp: Path) -> None:
        self.calls = tmp / "calls.jsonl"
        env = {
            "SAGACITY_BOOTSTRAP_SERVERS": bootstrap,
            "SAGACITY_TOPIC": topic,
            "SAGACITY_DATABASE_URL": dsn,
            "SAGACITY_TEST_CALL_LOG": str(self.calls),
        }
        self.service = Replica(
            env, ["--insecure-dev", "--tools", "tests.approvals.tools:Bank"], tmp / "service.log"
        )
        self.journal = KafkaJournal(bootstrap, topic=topic)
        agent = Sagacity(self.journal, compensation="delegated")
        bank = agent.wrap(Bank())

        def work() -> None:
            bank.reserve_inventory("SKU-9")
            bank.send_wire_transfer("100", "alice")

        result = agent.saga("transfer-77", work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        self.seq = result.awaiting_seq
        self.service.wait_ready()

    def curl(self, command: str) -> Any:
        """Run the card's ``command`` with this service's address and the request's seq."""
        line = command.replace("localhost:8080", f"127.0.0.1:{self.service.port}").replace(
            "/transfer-77/3", f"/transfer-77/{self.seq}"
        )
        done = subprocess.run(
            ["bash", "-c", line], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def entries(self, kind: EventType) -> list[Any]:
        return [e for e in self.journal.entries("transfer-77") if e.event_type is kind]

    def close(self) -> None:
        self.service.stop()
        self.journal.close()


@pytest.fixture
def card(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Card]:
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    made = Card(kafka_bootstrap, make_topic(partitions=1), pg_dsn, tmp_path)
    try:
        yield made
    finally:
        made.close()


def _pending(card: Card) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        requests: list[dict[str, Any]] = card.curl(SEE_PENDING)["requests"]
        if requests or time.monotonic() > deadline:
            return requests
        time.sleep(0.2)


def test_the_cards_approve_and_resume_run_the_approved_payload(card: Card) -> None:
    [pending] = _pending(card)
    assert (pending["saga_id"], pending["seq"], pending["payload"]) == (
        "transfer-77",
        card.seq,
        ALICE,
    )
    approved = card.curl(APPROVE)
    assert approved["request"]["state"] == "approved", approved
    resumed = card.curl(RESUME)
    assert (resumed.get("saga_status"), resumed.get("value")) == ("COMPLETED", "transfer-ok"), (
        resumed
    )
    [decision] = card.entries(E.APPROVED)
    assert decision.actor == "manager@company.com"
    # The resume named nobody: the requester journaled is the approver on record.
    [_, intent] = card.entries(E.INTENT)
    assert (intent.tool, intent.payload) == ("send_wire_transfer", ALICE)
    assert intent.attributes["requested_by"] == "manager@company.com"
    wires = [c for c in calls(card.calls) if c["tool"] == "send_wire_transfer"]
    assert wires == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]


def test_the_cards_reject_records_the_decision(card: Card) -> None:
    assert _pending(card)
    rejected = card.curl(REJECT)
    assert rejected["request"]["state"] == "rejected", rejected
    assert rejected["saga_status"] == "COMPENSATION_PENDING"
    [decision] = card.entries(E.REJECTED)
    assert decision.actor == "manager@company.com"
    refused = card.curl(RESUME)  # the request is closed: it cannot be resumed afterwards
    assert "cannot resume" in refused["detail"], refused
    assert [c for c in calls(card.calls) if c["tool"] == "send_wire_transfer"] == []
