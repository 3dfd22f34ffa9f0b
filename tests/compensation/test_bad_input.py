"""Bad input: failing, hanging and babbling compensations, bad ``--tools``, unknown tools,
poison messages and chains that do not verify.  The service runs in its own process."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sagacity import EntryDraft, EventType, SagaStatus, verify
from sagacity.chain import link
from sagacity.producer import KafkaJournal
from tests.compensation.conftest import ROOT, Lane
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def _last_about(chain: list[object], seq: int) -> object:
    found = [e for e in chain if getattr(e, "ref_seq", None) == seq]
    return found[-1]


def test_raising_hanging_and_garbage_compensations(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane()
    service = lane.start("--timeout", "1")
    agent = lane.agent()
    saga = f"bad-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("charge", {"order": "b1", "amount": 3}),
        ("fragile", {"order": "b1"}),
        ("sticky", {"order": "b1"}),
        ("odd", {"order": "b1"}),
    )
    started = time.monotonic()
    result = agent.wait_for_outcome(saga, timeout=30)
    assert time.monotonic() - started < 20  # the hang cost the timeout, not forever
    assert result.status is SagaStatus.COMPENSATION_FAILED
    chain = list(agent.entries(saga))
    assert verify(chain, saga_id=saga).ok
    seq = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
    raised = _last_about(chain, seq["fragile"])
    assert raised.event_type is E.COMPENSATION_FAILED  # type: ignore[attr-defined]
    assert raised.error == "RuntimeError: the refund gateway said no"  # type: ignore[attr-defined]
    hung = _last_about(chain, seq["sticky"])
    assert hung.event_type is E.COMPENSATION_FAILED  # type: ignore[attr-defined]
    assert hung.error.startswith("CompensationTimeoutError: stall for step")  # type: ignore[attr-defined]
    garbage = _last_about(chain, seq["odd"])
    assert garbage.event_type is E.COMPENSATED  # type: ignore[attr-defined]
    assert garbage.result.startswith("<unrepresentable result of type Unrepresentable")  # type: ignore[attr-defined]
    # The other steps were still undone, and the end names what is dirty.
    assert _last_about(chain, seq["charge"]).event_type is E.COMPENSATED  # type: ignore[attr-defined]
    assert {s.seq for s in result.dirty} == {seq["fragile"], seq["sticky"]}
    dirty = chain[-1].attributes["dirty"]
    assert f"seq {seq['fragile']} fragile" in dirty
    assert f"seq {seq['sticky']} sticky" in dirty
    assert "still dirty" in result.summary()
    assert service.metric("sagacity_compensation_steps_total", outcome="timeout") == 1
    assert service.metric("sagacity_compensation_steps_total", outcome="error") == 1
    # The service is still working after all that.
    again = f"bad-{uuid.uuid4().hex[:8]}"
    fail_after(agent, again, ("charge", {"order": "b2", "amount": 4}))
    assert agent.wait_for_outcome(again, timeout=30).status is SagaStatus.COMPENSATED


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("tests.compensation.no_such_module:shop", "cannot import 'tests.compensation.no_such"),
        ("tests.compensation.svc_tools:nothing", "has no attribute 'nothing'"),
        ("tests.compensation.svc_tools", "not of the form package.module:attr"),
        ("tests.compensation.svc_tools:NeedsSettings", "cannot be instantiated without"),
    ],
)
def test_unimportable_tools_fail_at_start_naming_the_target(
    make_lane: Callable[..., Lane], target: str, needle: str
) -> None:
    lane = make_lane(partitions=1)
    proc = subprocess.run(
        [sys.executable, "-m", "sagacity.cli", "serve", "compensation", "--tools", target],
        env=lane.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert target in proc.stderr
    assert needle in proc.stderr


def test_a_tool_the_service_does_not_know_fails_the_saga_with_the_reason(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    lane.start(tools=("tests.compensation.svc_tools:partial",))
    agent = lane.agent()
    saga = f"unknown-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("charge", {"order": "u1", "amount": 3}),
        ("reserve", {"order": "u1", "item": "chair"}),
    )
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    chain = list(agent.entries(saga))
    seq = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
    unknown = _last_about(chain, seq["reserve"])
    assert unknown.event_type is E.COMPENSATION_FAILED  # type: ignore[attr-defined]
    assert unknown.attributes["cause"] == "unregistered"  # type: ignore[attr-defined]
    assert "'reserve' is not registered here" in unknown.error  # type: ignore[attr-defined]
    assert [s.seq for s in result.dirty] == [seq["reserve"]]
    assert lane.effects() == [(saga, seq["charge"], "charge")]


def _dlq_messages(lane: Lane, want: int, timeout: float = 30) -> list[object]:
    return list(lane.dead_letters(want, timeout))


def test_poison_messages_are_dead_lettered_and_the_service_keeps_running(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane()
    service = lane.start()
    agent = lane.agent()
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic)
    lane.journals.append(journal)
    # 1. Bytes that are no journal event.
    producer = Producer({"bootstrap.servers": lane.bootstrap})
    producer.produce(lane.topic, key=b"junk-saga", value=b"\x00not avro at all")
    producer.flush(10)
    # 2. A saga whose COMPENSATION_REQUESTED was edited after it was hashed.
    saga = f"tampered-{uuid.uuid4().hex[:8]}"
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED))
    intent = journal.append(
        EntryDraft(saga_id=saga, event_type=E.INTENT, tool="charge", payload='{"amount":1}')
    )
    executed = journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.EXECUTED,
            tool="charge",
            result="{}",
            attributes={"ref_seq": str(intent.seq), "reversibility": "COMPENSATABLE"},
        )
    )
    journal.flush()
    request = link(
        EntryDraft(
            saga_id=saga,
            event_type=E.COMPENSATION_REQUESTED,
            error="RuntimeError: x",
            attributes={"reason": "FAILED"},
        ),
        seq=executed.seq + 1,
        prev_hash=executed.hash,
    )
    edited = dataclasses.replace(request, error="RuntimeError: edited after hashing")
    journal._produce(edited)  # the wire path every writer uses, with a forged body
    journal.flush()
    messages = _dlq_messages(lane, want=2)
    assert len(messages) == 2
    by_reason = {dict(m.headers())["sagacity.dlq.reason"].decode(): m for m in messages}  # type: ignore[attr-defined]
    junk = by_reason["undecodable"]
    assert junk.value() == b"\x00not avro at all"  # type: ignore[attr-defined]
    assert junk.key() == b"junk-saga"  # type: ignore[attr-defined]
    headers = dict(junk.headers())  # type: ignore[attr-defined]
    assert headers["sagacity.dlq.topic"].decode() == lane.topic
    tampered = by_reason["chain_does_not_verify"]
    assert tampered.key() == saga.encode()  # type: ignore[attr-defined]
    assert b"edited after hashing" in tampered.value()  # type: ignore[attr-defined]
    assert b"edited" in dict(tampered.headers())["sagacity.dlq.detail"]  # type: ignore[attr-defined]
    # Never acted on: no undo ran and nothing was journaled for the tampered saga.
    assert lane.calls() == []
    assert [e.event_type for e in journal.entries(saga)] == [E.SAGA_OPENED, E.INTENT, E.EXECUTED]
    assert service.metric("sagacity_compensation_dead_letters_total", reason="undecodable") == 1
    assert (
        service.metric("sagacity_compensation_dead_letters_total", reason="chain_does_not_verify")
        == 1
    )
    # Still running: a real failure is compensated.
    good = f"good-{uuid.uuid4().hex[:8]}"
    fail_after(agent, good, ("charge", {"order": "g", "amount": 1}))
    assert agent.wait_for_outcome(good, timeout=30).status is SagaStatus.COMPENSATED


def test_an_intent_without_outcome_is_suspect_not_undone(make_lane: Callable[..., Lane]) -> None:
    lane = make_lane()
    lane.start()
    agent = lane.agent()
    journal = agent.journal
    saga = f"suspect-{uuid.uuid4().hex[:8]}"
    # A run that crashed inside a tool call: INTENT journaled, no outcome, then handed off.
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED))
    charge = journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.INTENT,
            tool="charge",
            payload='{"order":"s","amount":2}',
            attributes={"reversibility": "COMPENSATABLE"},
        )
    )
    journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=E.COMPENSATION_REQUESTED,
            error="worker crashed",
            attributes={"reason": "FAILED", "ref_seq": str(charge.seq)},
        )
    )
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_ENDED, result="COMPENSATION_PENDING"))
    journal.flush()
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [charge.seq]
    chain = list(agent.entries(saga))
    suspect = [e for e in chain if e.event_type is E.SUSPECT]
    assert len(suspect) == 1
    assert suspect[0].attributes["phase"] == "call"
    assert suspect[0].payload == '{"order":"s","amount":2}'
    assert lane.calls() == []  # never undone blindly
    assert "suspect" in chain[-1].attributes["dirty"]
