"""The saga core on the real Kafka journal, with the agent and the services as separate writers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity import DecisionSigner, EventType, Sagacity, SagaStatus, verify
from sagacity.errors import PayloadMismatchError, SagacityError
from sagacity.signing._decision_signature import generate_key

from .test_approval import ALICE, MALLORY, Bank

pytestmark = pytest.mark.kafka

E = EventType


@pytest.fixture(scope="module")
def service_key(tmp_path_factory: pytest.TempPathFactory) -> DecisionSigner:
    """The approvals service's decision key (on a shared journal, decisions must be signed)."""
    return generate_key(tmp_path_factory.mktemp("keys") / "approvals.pem")


@pytest.fixture
def journals(kafka_bootstrap: str, make_topic: Callable[..., str]) -> Iterator[Callable[[], Any]]:
    """Journals on one fresh topic, each a writer of its own (as separate processes are)."""
    from sagacity.producer import KafkaJournal

    topic = make_topic(partitions=3)
    made: list[Any] = []

    def make() -> Any:
        journal = KafkaJournal(kafka_bootstrap, topic=topic, ack_timeout_s=10.0)
        made.append(journal)
        return journal

    yield make
    for journal in made:
        with contextlib.suppress(SagacityError):
            journal.close()


def _gate(agent: Sagacity, tools: Any, saga_id: str) -> int:
    def work() -> None:
        tools.reserve_inventory("SKU-9")
        tools.send_wire_transfer("100", "alice")

    result = agent.saga(saga_id, work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    return result.awaiting_seq


def test_stale_approval_attack_across_writers(
    journals: Callable[[], Any], service_key: DecisionSigner
) -> None:
    agent_bank, service_bank = Bank(), Bank()
    agent = Sagacity(journal=journals(), compensation="delegated")
    tools = agent.wrap(agent_bank)
    seq = _gate(agent, tools, "kafka-transfer-77")

    # The approvals service, compensating inline.
    approvals = Sagacity(journal=journals(), decision_signer=service_key)
    approvals.wrap(service_bank)
    (pending,) = approvals.pending_approvals("kafka-transfer-77")
    assert (pending.seq, pending.payload) == (seq, ALICE)
    approvals.approve("kafka-transfer-77", seq, "manager@company.com")
    with pytest.raises(PayloadMismatchError, match="payload changed since approval"):
        approvals.resume_saga("kafka-transfer-77", seq, MALLORY)
    assert agent_bank.wires == service_bank.wires == []
    assert [c.result for c in service_bank.released] == ["held-SKU-9"]

    chain = journals().entries("kafka-transfer-77")  # read back by a third party
    assert verify(chain).ok
    kinds = [e.event_type for e in chain]
    assert kinds.count(E.RESUME_REFUSED) == 1
    assert E.COMPENSATED in kinds
    assert chain[-1].event_type is E.SAGA_ENDED
    assert chain[-1].result == "COMPENSATED"


def test_approved_resume_across_writers(
    journals: Callable[[], Any], service_key: DecisionSigner
) -> None:
    agent = Sagacity(journal=journals(), compensation="delegated")
    tools = agent.wrap(Bank())
    seq = _gate(agent, tools, "kafka-transfer-78")
    service_bank = Bank()
    approvals = Sagacity(journal=journals(), compensation="delegated", decision_signer=service_key)
    approvals.wrap(service_bank)
    approvals.approve("kafka-transfer-78", seq, "manager@company.com")
    result = approvals.resume_saga("kafka-transfer-78", seq, ALICE)
    assert result.status is SagaStatus.COMPLETED
    assert service_bank.wires == [("100", "alice")]
    assert agent.wait_for_outcome("kafka-transfer-78", timeout=10).status is SagaStatus.COMPLETED


def test_delegated_failure_is_compensated_by_another_writer(journals: Callable[[], Any]) -> None:
    agent = Sagacity(journal=journals(), compensation="delegated")
    tools = agent.wrap(Bank())

    def work() -> None:
        tools.reserve_inventory("SKU-1")
        raise RuntimeError("model gave up")

    assert agent.saga("kafka-fail-1", work).status is SagaStatus.COMPENSATION_PENDING
    service_bank = Bank()
    service = Sagacity(journal=journals(), writer_id="compensation-service")
    service.wrap(service_bank)
    assert service.compensate("kafka-fail-1").status is SagaStatus.COMPENSATED
    assert [c.result for c in service_bank.released] == ["held-SKU-1"]
    final = agent.wait_for_outcome("kafka-fail-1", timeout=10)
    assert final.status is SagaStatus.COMPENSATED
    assert len(final.compensated) == 1
