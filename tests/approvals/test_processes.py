"""Done-when, across OS processes on real Kafka and PostgreSQL.

The agent runs in the test process on the Kafka journal (compensation delegated); every
approvals replica is its own ``sagacity serve approvals`` process reading the topic with the
consumer group and deciding through the HTTP API.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus
from sagacity.chain import link
from sagacity.entries import _attributes as attr
from sagacity.errors import ApprovalMissingError
from sagacity.producer import KafkaJournal
from sagacity.schemas import encode_entry
from sagacity.signing._decision_signature import generate_key

from ._process import REPO, Replica
from .conftest import ALICE, MALLORY, bearer, shown
from .tools import Bank, calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType


class Deployment:
    """A topic, a schema, an agent and the approvals replicas started so far."""

    def __init__(self, bootstrap: str, topic: str, dsn: str, auth_file: Path, tmp: Path) -> None:
        self.tmp = tmp
        self.calls = tmp / "calls.jsonl"
        key = generate_key(tmp / "approvals.pem")
        self.env = {
            "SAGACITY_BOOTSTRAP_SERVERS": bootstrap,
            "SAGACITY_TOPIC": topic,
            "SAGACITY_DATABASE_URL": dsn,
            "SAGACITY_APPROVALS_SWEEP_INTERVAL_S": "0.2",
            "SAGACITY_TEST_CALL_LOG": str(self.calls),
            "SAGACITY_APPROVALS_SIGNING_KEY": str(tmp / "approvals.pem"),
            "SAGACITY_APPROVALS_PUBLIC_KEY": key.public_hex,
        }
        self.auth = ["--auth", str(auth_file), "--tools", "tests.approvals.tools:Bank"]
        self.journal = KafkaJournal(bootstrap, topic=topic)
        self.agent = Sagacity(
            self.journal, compensation="delegated", approvals_public_key=key.public_hex
        )
        self.bank = self.agent.wrap(Bank())
        self.replicas: list[Replica] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []

    def replica(self, *extra: str) -> Replica:
        replica = Replica(
            self.env, [*self.auth, *extra], self.tmp / f"replica-{len(self.replicas)}.log"
        )
        self.replicas.append(replica)
        return replica

    def compensation_service(self) -> subprocess.Popen[bytes]:
        """The compensation service, acting on the hand-offs the approvals service journals."""
        log = (self.tmp / "compensation.log").open("ab")
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from sagacity.cli import main; main()",
                "serve",
                "compensation",
                "--tools",
                "tests.approvals.tools:BANK",
                "--bootstrap-servers",
                self.env["SAGACITY_BOOTSTRAP_SERVERS"],
                "--database-url",
                self.env["SAGACITY_DATABASE_URL"],
                "--topic",
                self.env["SAGACITY_TOPIC"],
                "--group",
                f"compensation-{self.env['SAGACITY_TOPIC']}",
                "--handoff-grace",
                "1",
            ],
            cwd=REPO,
            env={**os.environ, **self.env, "PYTHONPATH": str(REPO)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        self._logs.append(log)
        return process

    def gate(self, saga_id: str) -> int:
        def work() -> None:
            self.bank.reserve_inventory("SKU-9")
            self.bank.send_wire_transfer("100", "alice")

        result = self.agent.saga(saga_id, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        return result.awaiting_seq

    def kinds(self, saga_id: str) -> list[str]:
        return [e.event_type.value for e in self.journal.entries(saga_id)]

    def entries(self, saga_id: str, kind: EventType) -> list[Any]:
        return [e for e in self.journal.entries(saga_id) if e.event_type is kind]

    def wires(self) -> list[dict[str, str]]:
        return [c for c in calls(self.calls) if c["tool"] == "send_wire_transfer"]

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for log in self._logs:
            log.close()
        self.journal.close()


@pytest.fixture
def deployment(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Deployment]:
    d = Deployment(kafka_bootstrap, make_topic(partitions=3), pg_dsn, auth_file, tmp_path)
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(d.calls))
    try:
        yield d
    finally:
        d.close()


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def listed(replica: Replica, who: str = "bob") -> list[dict[str, Any]]:
    answer = httpx.get(f"{replica.url}/sagacity/approvals", headers=bearer(who), timeout=10)
    assert answer.status_code == 200, answer.text
    requests: list[dict[str, Any]] = answer.json()["requests"]
    return requests


def test_stale_approval_attack_and_the_refusals_across_processes(deployment: Deployment) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    # A message no reader can decode, under a saga's key: skipped and counted, never folded.
    producer = Producer({"bootstrap.servers": deployment.env["SAGACITY_BOOTSTRAP_SERVERS"]})
    producer.produce(deployment.env["SAGACITY_TOPIC"], key=b"wire-77", value=b"not avro")
    producer.flush(10)
    seq = deployment.gate("wire-77")
    other = deployment.gate("wire-78")
    wait_for(lambda: {r["saga_id"] for r in listed(replica)} == {"wire-77", "wire-78"})
    url = replica.url
    unknown = httpx.post(
        f"{url}/sagacity/approve/wire-77/{seq + 50}",
        json=shown(url, "wire-77", seq + 50),
        headers=bearer("alice"),
    )
    assert unknown.status_code == 404
    early = httpx.post(
        f"{url}/sagacity/resume/wire-78/{other}", json={"payload": ALICE}, headers=bearer("alice")
    )
    assert (early.status_code, early.json()["detail"]) == (409, "no human approval recorded")
    assert httpx.post(
        f"{url}/sagacity/approve/wire-77/{seq}",
        json=shown(url, "wire-77", seq),
        headers=bearer("alice"),
    ).is_success
    [approval] = deployment.entries("wire-77", E.APPROVED)
    assert approval.actor == "alice@example.com"
    attack = httpx.post(
        f"{url}/sagacity/resume/wire-77/{seq}", json={"payload": MALLORY}, headers=bearer("alice")
    )
    assert (attack.status_code, attack.json()["detail"]) == (409, "payload changed since approval")
    assert deployment.kinds("wire-77")[-4:] == [
        "APPROVED",
        "RESUME_REFUSED",
        "COMPENSATION_REQUESTED",
        "SAGA_ENDED",
    ]
    assert deployment.entries("wire-77", E.RESUME_REFUSED)[0].payload == MALLORY
    assert deployment.entries("wire-77", E.COMPENSATION_REQUESTED)[0].attributes["reason"] == (
        "RESUME_REFUSED"
    )
    assert httpx.post(
        f"{url}/sagacity/approve/wire-78/{other}",
        json=shown(url, "wire-78", other),
        headers=bearer("bob"),
    ).is_success
    spaced = httpx.post(
        f"{url}/sagacity/resume/wire-78/{other}",
        json={"payload": '{ "amount": "100", "to": "alice" }'},
        headers=bearer("bob"),
    )
    assert (spaced.status_code, spaced.json()["detail"]) == (409, "payload changed since approval")
    assert deployment.wires() == []
    metrics = httpx.get(f"{url}/metrics").text
    assert 'sagacity_approvals_consumer_events_total{outcome="skipped"} 1.0' in metrics
    # The hand-off: the compensation service undoes the hold taken before the gate.
    deployment.compensation_service()
    for saga in ("wire-77", "wire-78"):
        outcome = deployment.agent.wait_for_outcome(saga, timeout=60)
        assert outcome.status is SagaStatus.COMPENSATED, (saga, deployment.kinds(saga))
        [undone] = deployment.entries(saga, E.COMPENSATED)
        assert deployment.journal.entries(saga)[undone.ref_seq - 1].tool == "reserve_inventory"
    released = [c for c in calls(deployment.calls) if c["tool"] == "release_inventory"]
    assert len(released) == 2
    assert deployment.wires() == []


def test_pending_requests_survive_a_restart_and_resume_runs_in_the_service(
    deployment: Deployment,
) -> None:
    first = deployment.replica()
    first.wait_ready()
    seq = deployment.gate("wire-restart")
    wait_for(lambda: listed(first))
    first.stop()
    second = deployment.replica()
    second.wait_ready()
    [request] = listed(second)
    assert (request["saga_id"], request["seq"], request["payload"]) == ("wire-restart", seq, ALICE)
    url = second.url
    assert httpx.post(
        f"{url}/sagacity/approve/wire-restart/{seq}",
        json=shown(url, "wire-restart", seq),
        headers=bearer("alice"),
    ).is_success
    done = httpx.post(
        f"{url}/sagacity/resume/wire-restart/{seq}",
        json={"payload": ALICE},
        headers=bearer("alice"),
        timeout=30,
    )
    assert done.status_code == 200, done.text
    assert done.json()["saga_status"] == "COMPLETED"
    assert deployment.wires() == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]
    assert deployment.kinds("wire-restart")[-4:] == ["APPROVED", "INTENT", "EXECUTED", "SAGA_ENDED"]
    assert httpx.get(f"{url}/sagacity/approvals", headers=bearer("eve")).json()["requests"] == []
    assert httpx.post(f"{url}/sagacity/approve/wire-restart/{seq}").status_code == 401


def test_two_replicas_decide_each_request_exactly_once(deployment: Deployment) -> None:
    a, b = deployment.replica(), deployment.replica()
    a.wait_ready(partitions=False)
    b.wait_ready(partitions=False)
    sagas = [f"race-{i}" for i in range(4)]
    seqs = {s: deployment.gate(s) for s in sagas}
    wait_for(lambda: len(listed(a)) == 4)
    statuses: dict[str, list[int]] = {s: [] for s in sagas}
    plan = []
    for i, saga in enumerate(sagas):
        # Half double-clicked approves, half approve racing reject, always across replicas.
        second = "approve" if i % 2 == 0 else "reject"
        plan += [(a, saga, "approve"), (b, saga, second)]
    barrier = threading.Barrier(len(plan))

    def hit(replica: Replica, saga: str, action: str) -> None:
        barrier.wait()
        body = shown(replica.url, saga, seqs[saga]) if action == "approve" else None
        answer = httpx.post(
            f"{replica.url}/sagacity/{action}/{saga}/{seqs[saga]}",
            json=body,
            headers=bearer("bob"),
            timeout=60,
        )
        statuses[saga].append(answer.status_code)

    threads = [threading.Thread(target=hit, args=step) for step in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for saga in sagas:
        assert sorted(statuses[saga]) == [200, 409], (saga, statuses[saga])
        decisions = deployment.entries(saga, E.APPROVED) + deployment.entries(saga, E.REJECTED)
        assert len(decisions) == 1, (saga, deployment.kinds(saga))
        read = deployment.journal.read(saga)
        assert read.forks == []


def test_expiry_is_swept_and_handed_to_compensation(deployment: Deployment) -> None:
    replica = deployment.replica("--approval-ttl", "1")
    replica.wait_ready()
    seq = deployment.gate("wire-ttl")
    wait_for(lambda: deployment.entries("wire-ttl", E.EXPIRED), timeout=20)
    [expired] = deployment.entries("wire-ttl", E.EXPIRED)
    assert expired.ref_seq == seq
    assert deployment.entries("wire-ttl", E.COMPENSATION_REQUESTED)[0].attributes["reason"] == (
        "EXPIRED"
    )
    late = httpx.post(
        f"{replica.url}/sagacity/approve/wire-ttl/{seq}",
        json=shown(replica.url, "wire-ttl", seq),
        headers=bearer("bob"),
    )
    assert late.status_code == 409
    assert deployment.entries("wire-ttl", E.APPROVED) == []


def _forge_approval(deployment: Deployment, saga_id: str, seq: int) -> None:
    """What any process that can produce to the topic can do: an APPROVED linked to the head
    with the package's own ``link`` and ``encode_entry``, naming any approver."""
    head = deployment.journal.entries(saga_id)[-1]
    request = deployment.journal.entries(saga_id)[seq - 1]
    forged = link(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.APPROVED,
            tool=request.tool,
            actor="alice@example.com",
            attributes={
                attr.REF_SEQ: str(seq),
                attr.POLICY_VERSION: "1",
                attr.PAYLOAD_SHA256: request.attributes[attr.PAYLOAD_SHA256],
            },
        ),
        seq=head.seq + 1,
        prev_hash=head.hash,
    )
    producer = Producer(
        {
            "bootstrap.servers": deployment.env["SAGACITY_BOOTSTRAP_SERVERS"],
            "partitioner": "murmur2_random",  # the journal's: the saga's own partition
        }
    )
    producer.produce(
        deployment.env["SAGACITY_TOPIC"], key=saga_id.encode(), value=encode_entry(forged)
    )
    assert producer.flush(10) == 0
    wait_for(lambda: deployment.entries(saga_id, E.APPROVED))


def test_a_forged_approval_on_the_topic_never_runs_the_tool(deployment: Deployment) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    served = deployment.gate("forged-served")
    agent_side = deployment.gate("forged-agent")
    genuine = deployment.gate("genuine")
    wait_for(lambda: len(listed(replica)) == 3)
    _forge_approval(deployment, "forged-served", served)
    _forge_approval(deployment, "forged-agent", agent_side)
    # Through the approvals service's own resume.
    refused = httpx.post(
        f"{replica.url}/sagacity/resume/forged-served/{served}",
        json={"payload": ALICE},
        headers=bearer("alice"),
        timeout=30,
    )
    # Refused, with the reason: the approval on the topic is not the service's signed one.
    assert refused.status_code == 409
    assert re.fullmatch(
        r"no human approval recorded: the APPROVED at seq \d+ does not verify "
        r"\(unsigned_decision\)",
        refused.json()["detail"],
    )
    # Through the agent's own resume (compensation delegated).
    with pytest.raises(ApprovalMissingError, match="no human approval recorded"):
        deployment.agent.resume_saga("forged-agent", agent_side, ALICE)
    for saga in ("forged-served", "forged-agent"):
        kinds = deployment.kinds(saga)
        assert kinds[-4:] == [
            "APPROVED",
            "RESUME_REFUSED",
            "COMPENSATION_REQUESTED",
            "SAGA_ENDED",
        ], kinds
        [refusal] = deployment.entries(saga, E.RESUME_REFUSED)
        assert "unsigned_decision" in (refusal.error or "")
    # A decision the service signed is honoured by the agent in another process.
    approved = httpx.post(
        f"{replica.url}/sagacity/approve/genuine/{genuine}",
        json=shown(replica.url, "genuine", genuine),
        headers=bearer("alice"),
        timeout=30,
    )
    assert approved.is_success, approved.text
    [signed] = deployment.entries("genuine", E.APPROVED)
    assert signed.attributes[attr.DECISION_SIGNATURE].startswith("SGCD3:")
    done = deployment.agent.resume_saga("genuine", genuine, ALICE)
    assert done.status is SagaStatus.COMPLETED
    assert deployment.wires() == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]
    # The compensation service undoes the hold of each refused saga.
    deployment.compensation_service()
    for saga in ("forged-served", "forged-agent"):
        outcome = deployment.agent.wait_for_outcome(saga, timeout=60)
        assert outcome.status is SagaStatus.COMPENSATED, (saga, deployment.kinds(saga))
    released = [c for c in calls(deployment.calls) if c["tool"] == "release_inventory"]
    assert len(released) == 2
    assert len(deployment.wires()) == 1


def test_the_service_refuses_to_start_on_kafka_without_a_signing_key(
    deployment: Deployment,
) -> None:
    del deployment.env["SAGACITY_APPROVALS_SIGNING_KEY"]
    replica = deployment.replica()
    assert replica.process.wait(30) != 0
    assert "sagacity approvals keygen" in replica.logfile.read_text()


def test_insecure_dev_without_a_key_signs_with_an_ephemeral_one(deployment: Deployment) -> None:
    del deployment.env["SAGACITY_APPROVALS_SIGNING_KEY"]
    replica = Replica(
        deployment.env,
        ["--insecure-dev", "--tools", "tests.approvals.tools:Bank"],
        deployment.tmp / "insecure.log",
    )
    deployment.replicas.append(replica)
    replica.wait_ready()
    seq = deployment.gate("wire-dev")
    url = replica.url
    assert httpx.post(
        f"{url}/sagacity/approve/wire-dev/{seq}", json={"approver": "dev@example.com"}
    ).is_success
    [approval] = deployment.entries("wire-dev", E.APPROVED)
    logged = replica.logfile.read_text()
    assert "ephemeral approvals key" in logged
    key_id = approval.attributes[attr.DECISION_SIGNATURE].split(":")[1]
    assert key_id in logged
    # An agent pinned to another key refuses it (the service's own resume accepts it:
    # test_seed_curl.py resumes through an insecure-dev service).
    with pytest.raises(ApprovalMissingError):
        deployment.agent.resume_saga("wire-dev", seq, ALICE)
