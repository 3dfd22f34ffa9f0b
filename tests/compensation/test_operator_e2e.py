"""Compensation after a saga ended runs only on the operator's signed word (real Kafka, Postgres).

Any writer of the topic can append a linked ``COMPENSATION_REQUESTED`` to a saga that ended
``COMPLETED``.  The compensation service, in its own process and pinning the operator's public
key, must dead-letter such a request with its reason and call no undo; the request journaled by
``sagacity saga compensate`` with the operator key is acted on, and each step is undone once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus, verify
from sagacity.cli import main
from sagacity.producer import KafkaJournal
from sagacity.signing._operator_signature import OperatorSigner, generate_key
from tests.compensation.conftest import Lane, ServiceProcess

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _completed_saga(agent: Sagacity, saga: str) -> None:
    def work() -> None:
        for name, kwargs in (
            ("charge", {"order": saga, "amount": 30}),
            ("reserve", {"order": saga, "item": "lamp"}),
        ):
            tool = agent.registry.get(name)
            assert tool is not None
            tool.wrapped(**kwargs)

    assert agent.saga(saga, work).status is SagaStatus.COMPLETED


def _forge_request(lane: Lane, saga: str, **attributes: str) -> None:
    """A linked COMPENSATION_REQUESTED from another writer of the topic (an agent)."""
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, writer_id="agent-mallory")
    lane.journals.append(journal)
    journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.COMPENSATION_REQUESTED,
            actor="operator:root@ops",
            error="please undo",
            attributes={"reason": "FAILED", **attributes},
        ),
        durable=True,
    )


def _wait_metric(service: ServiceProcess, name: str, want: float, **labels: str) -> None:
    deadline = time.monotonic() + 60
    while service.metric(name, **labels) < want:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} never reached {want}:\n{service.logs()}")
        time.sleep(0.2)


def _compensate(lane: Lane, saga: str, key: Path, reason: str = "refund the order") -> Any:
    env = lane.env(SAGACITY_OPERATOR_SIGNING_KEY=str(key))
    return CliRunner().invoke(
        main, ["saga", "compensate", "--saga", saga, "--reason", reason], env=env
    )


@pytest.fixture
def operator(tmp_path: Path) -> tuple[OperatorSigner, Path]:
    path = tmp_path / "operator.pem"
    return generate_key(path), path


def test_an_unsigned_request_on_a_completed_saga_is_dead_lettered_and_nothing_undone(
    make_lane: Callable[..., Lane], operator: tuple[OperatorSigner, Path], tmp_path: Path
) -> None:
    signer, _ = operator
    lane = make_lane()
    service = lane.start(SAGACITY_OPERATOR_PUBLIC_KEY=signer.public_hex)
    agent = lane.agent()
    unsigned, wrong = f"done-{uuid.uuid4().hex[:8]}", f"done-{uuid.uuid4().hex[:8]}"
    _completed_saga(agent, unsigned)
    _completed_saga(agent, wrong)
    before = {s: len(agent.entries(s)) for s in (unsigned, wrong)}
    _forge_request(lane, unsigned)
    # Signed, but by a key the service does not pin (a copied signature format is not enough).
    other = generate_key(tmp_path / "other.pem")
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, writer_id="agent-mallory")
    lane.journals.append(journal)
    from sagacity.signing._operator_signature import append_signed

    append_signed(
        journal,
        EntryDraft(
            saga_id=wrong,
            event_type=E.COMPENSATION_REQUESTED,
            actor="operator:root@ops",
            attributes={"reason": "FAILED"},
        ),
        other,
    )

    _wait_metric(
        service,
        "sagacity_compensation_requests_refused_total",
        1,
        reason="unsigned_operator_event",
    )
    _wait_metric(
        service, "sagacity_compensation_requests_refused_total", 1, reason="unknown_operator_key"
    )
    dead = {dict(m.headers())["sagacity.dlq.reason"].decode(): m for m in lane.dead_letters(want=2)}
    assert set(dead) == {"unsigned_operator_event", "unknown_operator_key"}
    detail = dict(dead["unsigned_operator_event"].headers())["sagacity.dlq.detail"].decode()
    assert "ended COMPLETED" in detail
    assert "would undo finished work" in detail
    assert (
        service.metric("sagacity_compensation_dead_letters_total", reason="unsigned_operator_event")
        == 1
    )
    assert lane.calls() == []
    # Nothing was journaled for either: the service never took the sagas.
    for saga in (unsigned, wrong):
        chain = list(agent.entries(saga))
        assert len(chain) == before[saga] + 1
        assert chain[-1].event_type is E.COMPENSATION_REQUESTED
    refused = [r for r in service.records() if r["msg"].startswith("compensation request refused")]
    assert {r["saga_id"] for r in refused} == {unsigned, wrong}


def test_the_operators_signed_request_undoes_a_completed_saga_exactly_once(
    make_lane: Callable[..., Lane], operator: tuple[OperatorSigner, Path]
) -> None:
    signer, key = operator
    lane = make_lane()
    service = lane.start(SAGACITY_OPERATOR_PUBLIC_KEY=signer.public_hex)
    agent = lane.agent()
    saga = f"done-{uuid.uuid4().hex[:8]}"
    _completed_saga(agent, saga)

    result = _compensate(lane, saga, key)
    assert result.exit_code == 0, result.output
    assert f"signed with operator key {signer.key_id}" in result.output
    # The saga's last end said COMPLETED until the service journals its new end.
    _wait_metric(service, "sagacity_compensation_sagas_total", 1, status="COMPENSATED")
    outcome = agent.outcome(saga)
    assert outcome is not None
    assert outcome.status is SagaStatus.COMPENSATED
    assert sorted(t for s, _q, t in lane.effects() if s == saga) == ["charge", "reserve"]
    chain = list(agent.entries(saga))
    assert verify(chain, saga_id=saga).ok
    (request,) = [e for e in chain if e.event_type is E.COMPENSATION_REQUESTED]
    assert request.attributes["reason"] == "refund the order"
    assert request.attributes["operator_signature"].startswith(f"SGCO1:{signer.key_id}:")

    # Asked again: the saga ended COMPENSATED, the request stands, and nothing is undone twice.
    again = _compensate(lane, saga, key, reason="make sure")
    assert again.exit_code == 0, again.output
    _wait_metric(service, "sagacity_compensation_sagas_total", 2, status="COMPENSATED")
    assert sorted(t for s, _q, t in lane.effects() if s == saga) == ["charge", "reserve"]
    assert service.metric("sagacity_compensation_requests_refused_total") == 0


def test_saga_compensate_refuses_a_live_or_unknown_saga(
    make_lane: Callable[..., Lane], operator: tuple[OperatorSigner, Path]
) -> None:
    _, key = operator
    lane = make_lane()
    agent = lane.agent()
    live = f"live-{uuid.uuid4().hex[:8]}"
    run = agent.open_run(live)
    tool = agent.registry.get("charge")
    assert tool is not None
    run.call(lambda: tool.wrapped(order=live, amount=1))
    result = _compensate(lane, live, key)
    assert result.exit_code == 1, result.output
    assert "it is live" in result.output
    assert "nothing was journaled" in result.output
    unknown = _compensate(lane, "no-such-saga", key)
    assert unknown.exit_code == 1, unknown.output
    assert "is unknown" in unknown.output
    assert "Traceback" not in result.output + unknown.output


@pytest.mark.parametrize("forgery", ["unsigned", "signed by another key"])
def test_a_forged_erased_does_not_end_a_pending_request(
    make_lane: Callable[..., Lane],
    operator: tuple[OperatorSigner, Path],
    tmp_path: Path,
    forgery: str,
) -> None:
    """Any writer can append ERASED: one no pinned operator key signed, appended after a run
    handed its saga to compensation, must not end the pending request (the saga would stay
    COMPENSATION_PENDING, its steps never undone)."""
    from sagacity.signing._operator_signature import append_signed
    from tests.compensation.test_service_e2e import fail_after

    signer, _ = operator
    lane = make_lane()
    agent = lane.agent()
    saga = f"order-{uuid.uuid4().hex[:8]}"
    fail_after(agent, saga, ("charge", {"order": saga, "amount": 30}))
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, writer_id="agent-mallory")
    lane.journals.append(journal)
    draft = EntryDraft(
        saga_id=saga,
        event_type=E.ERASED,
        actor="dpo@example.org",
        attributes={"reason": "art. 17", "erased": "{}", "erased_key": "none"},
    )
    if forgery == "unsigned":
        forged = journal.append(draft, durable=True)
    else:
        forged = append_signed(journal, draft, generate_key(tmp_path / "mallory.pem"))
    lane.start(SAGACITY_OPERATOR_PUBLIC_KEY=signer.public_hex)
    result = agent.wait_for_outcome(saga, timeout=60)
    assert result.status is SagaStatus.COMPENSATED
    charged = next(e.seq for e in agent.entries(saga) if e.event_type is E.EXECUTED)
    assert lane.calls() == [(saga, charged, "charge")]
    assert [e.seq for e in agent.entries(saga) if e.event_type is E.ERASED] == [forged.seq]
