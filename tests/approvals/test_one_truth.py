"""One truth of a saga, through the running approvals service on real Kafka and PostgreSQL.

Attacks by a process that can produce to the journal topic (every agent can): a decoy request
beside the chain's own, a request claiming fewer signatures than its tool needs, a genuine
decision copied into another journal, and a message put on another partition than its key's.
What the approver is shown is the chain's request, what is signed binds it, and what runs is
only what was signed (docs/adr/0025-trust-model.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus
from sagacity.chain import link, payload_sha256
from sagacity.entries import _attributes as attr
from sagacity.errors import ApprovalMissingError
from sagacity.producer import KafkaJournal, partition_for
from sagacity.schemas import encode_entry

from .conftest import ALICE, MALLORY, bearer, shown
from .test_processes import Deployment, listed, wait_for
from .test_processes import deployment as deployment  # the same fixture: a topic, replicas
from .tools import calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType


def _producer(deployment: Deployment) -> Producer:
    return Producer(
        {
            "bootstrap.servers": deployment.env["SAGACITY_BOOTSTRAP_SERVERS"],
            "partitioner": "murmur2_random",  # the journal's: the saga's own partition
        }
    )


def _produce(deployment: Deployment, saga_id: str, value: bytes, **where: int) -> None:
    producer = _producer(deployment)
    producer.produce(deployment.env["SAGACITY_TOPIC"], key=saga_id.encode(), value=value, **where)
    assert producer.flush(10) == 0


def _decoy(saga_id: str, seq: int, *, tool: str, payload: str) -> Any:
    """A request with a valid hash at ``seq`` whose previous hash links to nothing."""
    return link(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.AWAITING_APPROVAL,
            tool=tool,
            payload=payload,
            attributes={
                attr.PAYLOAD_SHA256: payload_sha256(payload),
                attr.SIGNATURES_REQUIRED: "1",
                attr.POLICY_VERSION: "1",
                attr.REVERSIBILITY: "IRREVERSIBLE",
            },
        ),
        seq=seq,
        prev_hash="ab" * 32,
    )


def _decoyed_gate(deployment: Deployment, saga_id: str, *, decoy_tool: str) -> tuple[int, Any]:
    """A saga whose hostile wire request is preceded on the topic, at the same seq, by a
    decoy naming ``decoy_tool`` with a harmless payload; the request's seq and the decoy."""
    decoys: list[Any] = []

    def work() -> None:
        deployment.bank.reserve_inventory("SKU-9")
        deployment.journal.flush()
        head = deployment.journal.entries(saga_id)[-1]
        decoy = _decoy(saga_id, head.seq + 1, tool=decoy_tool, payload=ALICE)
        _produce(deployment, saga_id, encode_entry(decoy))
        decoys.append(decoy)
        deployment.bank.send_wire_transfer("999999", "mallory")

    result = deployment.agent.saga(saga_id, work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq == decoys[0].seq
    return result.awaiting_seq, decoys[0]


def test_a_decoy_request_is_never_shown_and_an_approval_of_it_is_refused(
    deployment: Deployment,
) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    seq, decoy = _decoyed_gate(deployment, "decoy", decoy_tool="send_wire_transfer")
    request = deployment.journal.entries("decoy")[seq - 1]
    assert (request.payload, decoy.payload) == (MALLORY, ALICE)
    wait_for(lambda: [r["saga_id"] for r in listed(replica)] == ["decoy"])
    # The inbox and the request's page show the chain's request: the hostile payload.
    [row] = listed(replica)
    assert (row["seq"], row["payload"], row["request_hash"]) == (seq, MALLORY, request.hash)
    one = httpx.get(f"{replica.url}/sagacity/approvals/decoy/{seq}", headers=bearer("alice"))
    assert (one.json()["payload"], one.json()["request_hash"]) == (MALLORY, request.hash)
    # The decoy is quarantined with its reason, and the health check says so.
    health = httpx.get(f"{replica.url}/healthz").json()
    assert health["quarantined"] >= 1
    # An approval naming what the decoy showed is refused and journaled; nothing is signed.
    refused = httpx.post(
        f"{replica.url}/sagacity/approve/decoy/{seq}",
        json={"request_hash": decoy.hash},
        headers=bearer("alice"),
    )
    assert refused.status_code == 409, refused.text
    assert "not the chain's request" in refused.json()["detail"]
    assert deployment.entries("decoy", E.APPROVED) == []
    [journaled] = deployment.entries("decoy", E.APPROVAL_REFUSED)
    assert (journaled.actor, journaled.attributes[attr.REQUEST_HASH]) == (
        "alice@example.com",
        decoy.hash,
    )
    # The request stays pending; approved as shown, its signature binds the chain's request.
    approved = httpx.post(
        f"{replica.url}/sagacity/approve/decoy/{seq}",
        json=shown(replica.url, "decoy", seq, "alice"),
        headers=bearer("alice"),
    )
    assert approved.status_code == 200, approved.text
    [signed] = deployment.entries("decoy", E.APPROVED)
    assert signed.attributes[attr.REQUEST_HASH] == request.hash
    assert deployment.wires() == []


def test_a_decoy_naming_a_narrow_principals_tool_gives_it_nothing(
    deployment: Deployment,
) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    # eve may decide reserve_inventory only: the decoy names it, the chain's request is a wire.
    seq, decoy = _decoyed_gate(deployment, "scoped", decoy_tool="reserve_inventory")
    wait_for(lambda: [r["saga_id"] for r in listed(replica)] == ["scoped"])
    assert listed(replica, "eve") == []
    seen = httpx.get(f"{replica.url}/sagacity/approvals/scoped/{seq}", headers=bearer("eve"))
    assert seen.status_code == 403
    for body in ({"request_hash": decoy.hash}, shown(replica.url, "scoped", seq)):
        answer = httpx.post(
            f"{replica.url}/sagacity/approve/scoped/{seq}", json=body, headers=bearer("eve")
        )
        assert answer.status_code == 403, answer.text
    assert deployment.entries("scoped", E.APPROVED) == []


def _raw_request(deployment: Deployment, saga_id: str, *, claimed: str) -> int:
    """A saga written by hand (any producer can): opened, then a linked request for the
    PRIVILEGED grant claiming ``claimed`` signatures; its seq."""
    opened = link(
        EntryDraft(saga_id=saga_id, event_type=E.SAGA_OPENED, actor="forger"),
        seq=1,
        prev_hash="0" * 64,
    )
    payload = '{"principal":"agent-7","role":"operator"}'
    request = link(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.AWAITING_APPROVAL,
            tool="grant_agent_access",
            payload=payload,
            attributes={
                attr.PAYLOAD_SHA256: payload_sha256(payload),
                attr.SIGNATURES_REQUIRED: claimed,
                attr.POLICY_VERSION: "1",
                attr.REVERSIBILITY: "IRREVERSIBLE",
            },
        ),
        seq=2,
        prev_hash=opened.hash,
    )
    for entry in (opened, request):
        _produce(deployment, saga_id, encode_entry(entry))
    return request.seq


def test_a_request_claiming_fewer_signatures_than_its_tool_needs_is_refused(
    deployment: Deployment,
) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    seq = _raw_request(deployment, "one-signature", claimed="1")
    wait_for(lambda: [r["saga_id"] for r in listed(replica)] == ["one-signature"])
    answer = httpx.post(
        f"{replica.url}/sagacity/approve/one-signature/{seq}",
        json=shown(replica.url, "one-signature", seq),
        headers=bearer("bob"),
    )
    assert answer.status_code == 409, answer.text
    assert "declared PRIVILEGED here, which needs 2" in answer.json()["detail"]
    assert deployment.entries("one-signature", E.APPROVED) == []
    assert len(deployment.entries("one-signature", E.APPROVAL_REFUSED)) == 1
    assert [c for c in calls(deployment.calls) if c["tool"] == "grant_agent_access"] == []


def _copy_saga(deployment: Deployment, saga_id: str, topic: str) -> None:
    """Every message of ``saga_id``, byte for byte and in order, produced to ``topic``."""
    source = deployment.env["SAGACITY_TOPIC"]
    bootstrap = deployment.env["SAGACITY_BOOTSTRAP_SERVERS"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"copy-{topic}"})
    partitions = len(consumer.list_topics(source, timeout=10).topics[source].partitions)
    partition = partition_for(saga_id.encode(), partitions)
    low, high = consumer.get_watermark_offsets(TopicPartition(source, partition), timeout=10)
    consumer.assign([TopicPartition(source, partition, low)])
    producer = _producer(deployment)
    read = low
    while read < high:
        message = consumer.poll(5)
        assert message is not None
        assert message.error() is None
        read = (message.offset() or 0) + 1
        if message.key() == saga_id.encode():
            producer.produce(topic, key=message.key(), value=message.value())
    consumer.close()
    assert producer.flush(10) == 0


def test_a_decision_copied_into_another_journal_runs_nothing_there(
    deployment: Deployment, make_topic: Callable[..., str]
) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    seq = deployment.gate("copied")
    wait_for(lambda: listed(replica))
    approved = httpx.post(
        f"{replica.url}/sagacity/approve/copied/{seq}",
        json=shown(replica.url, "copied", seq, "alice"),
        headers=bearer("alice"),
    )
    assert approved.status_code == 200, approved.text
    # The whole saga, its genuine signed approval included, copied to a second topic whose
    # agent pins the same approvals key.
    other = make_topic(partitions=3)
    _copy_saga(deployment, "copied", other)
    bootstrap = deployment.env["SAGACITY_BOOTSTRAP_SERVERS"]
    with KafkaJournal(bootstrap, topic=other) as journal:
        elsewhere = Sagacity(
            journal,
            compensation="delegated",
            approvals_public_key=deployment.env["SAGACITY_APPROVALS_PUBLIC_KEY"],
        )
        from .tools import Bank

        elsewhere.wrap(Bank())
        assert [e.hash for e in journal.entries("copied")] == [
            e.hash for e in deployment.journal.entries("copied")
        ]
        with pytest.raises(ApprovalMissingError) as refused:
            elsewhere.resume_saga("copied", seq, ALICE)
        assert "decision_for_another_journal" in (refused.value.detail or "")
    assert deployment.wires() == []
    # On its own journal the same decision runs the call, once.
    done = deployment.agent.resume_saga("copied", seq, ALICE)
    assert done.status is SagaStatus.COMPLETED
    assert deployment.wires() == [{"tool": "send_wire_transfer", "amount": "100", "to": "alice"}]


def test_a_rejection_on_another_partition_hides_nothing_from_the_inbox(
    deployment: Deployment,
) -> None:
    replica = deployment.replica()
    replica.wait_ready()
    seq = deployment.gate("misplaced")
    wait_for(lambda: listed(replica))
    head = deployment.journal.entries("misplaced")[-1]
    rejection = link(
        EntryDraft(
            saga_id="misplaced",
            event_type=E.REJECTED,
            tool="send_wire_transfer",
            actor="bob@example.com",
            attributes={attr.REF_SEQ: str(seq)},
        ),
        seq=head.seq + 1,
        prev_hash=head.hash,
    )
    home = partition_for(b"misplaced", 3)
    _produce(deployment, "misplaced", encode_entry(rejection), partition=(home + 1) % 3)
    # A later legitimate request, produced after the misplaced one, is folded: the consumer
    # went past it.
    later = deployment.gate("after-misplaced")
    wait_for(lambda: {r["saga_id"] for r in listed(replica)} == {"misplaced", "after-misplaced"})
    [row] = [r for r in listed(replica) if r["saga_id"] == "misplaced"]
    assert row["state"] == "pending"
    health = httpx.get(f"{replica.url}/healthz").json()
    assert health["quarantined"] >= 1
    assert later >= 1
