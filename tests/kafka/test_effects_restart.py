"""A process killed during a call and restarted, on the real broker
(docs/adr/0026-effects-and-refusals.md): the restarted process (the same writer id) continues
its conversation with the effects read from the topic, so the call the framework replays is not
made twice — replayed when it had executed, in doubt when it had no outcome."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import EventType, Sagacity, SagaStatus, verify
from sagacity.chain._grammar import check
from sagacity.errors import SagaExistsError
from sagacity.producer import KafkaJournal

pytestmark = pytest.mark.kafka
E = EventType
WORKER = Path(__file__).with_name("effects_agent.py")
sys.path.insert(0, str(Path(__file__).parent))

from effects_agent import Payments  # noqa: E402


def _killed_at(
    stage: str, bootstrap: str, topic: str, writer: str, saga: str, ledger: Path
) -> None:
    agent = subprocess.Popen(
        [sys.executable, str(WORKER), bootstrap, topic, writer, saga, str(ledger), stage],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()
        assert line, "the agent process died before its stage"
        assert json.loads(line) == {"stage": stage}
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(30)
        if agent.stdout is not None:
            agent.stdout.close()
    assert agent.returncode == -signal.SIGKILL


def _ledger(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_call_killed_after_its_intent_is_in_doubt_after_the_restart(
    kafka_bootstrap: str,
    topic: str,
    journal_factory: Callable[..., KafkaJournal],
    tmp_path: Path,
) -> None:
    writer, saga = f"agent-{uuid.uuid4().hex[:6]}", f"chat-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.txt"
    _killed_at("intent", kafka_bootstrap, topic, writer, saga, ledger)
    assert _ledger(ledger) == ["charge o-1 20"]  # the effect was made; nobody knows

    # The restarted process: the same writer id, the same conversation.
    restarted = Sagacity(journal_factory(topic, writer_id=writer))
    payments = Payments(ledger, stage="none")
    tools = restarted.wrap(payments)
    conversation = restarted.conversation(saga)
    said = conversation.call(lambda: tools.charge("o-1", 20))  # the framework replays it
    assert said.startswith(
        f"[IN_DOUBT] Tool 'charge' was not called: the call at seq 2 of saga {saga} with the "
        "same order_id stopped without an outcome"
    )
    assert conversation.call(lambda: tools.charge("o-1", 20)).startswith("[IN_DOUBT]")
    assert _ledger(ledger) == ["charge o-1 20"]  # not charged again
    result = conversation.end()
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [2]

    entries = journal_factory(topic).read(saga).entries
    kinds = [e.event_type for e in entries]
    assert kinds == [E.SAGA_OPENED, E.INTENT, E.SUSPECT, E.SAGA_ENDED]
    assert entries[2].ref_seq == 2
    assert entries[2].attributes["writer"] == writer
    assert verify(entries).ok
    assert check(entries) == []
    # Another writer does not continue it.
    with pytest.raises(SagaExistsError):
        Sagacity(journal_factory(topic, writer_id="someone-else")).conversation(saga)


def test_a_call_that_executed_before_the_kill_is_replayed_after_the_restart(
    kafka_bootstrap: str,
    topic: str,
    journal_factory: Callable[..., KafkaJournal],
    tmp_path: Path,
) -> None:
    writer, saga = f"agent-{uuid.uuid4().hex[:6]}", f"chat-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.txt"
    _killed_at("executed", kafka_bootstrap, topic, writer, saga, ledger)

    restarted = Sagacity(journal_factory(topic, writer_id=writer))
    tools = restarted.wrap(Payments(ledger, stage="none"))
    conversation = restarted.conversation(saga)
    assert conversation.call(lambda: tools.charge("o-1", 20)) == "charged o-1"
    conversation.call(lambda: tools.charge("o-2", 5))  # a new effect runs
    assert _ledger(ledger) == ["charge o-1 20", "charge o-2 5"]
    assert conversation.end().status is SagaStatus.COMPLETED

    entries = journal_factory(topic).read(saga).entries
    replayed = [e for e in entries if e.event_type is E.REPLAYED]
    assert [e.ref_seq for e in replayed] == [2]
    assert verify(entries).ok
    assert check(entries) == []
