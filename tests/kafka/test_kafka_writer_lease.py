"""The writer lease on the real broker (docs/adr/0011-writer-lease.md): a dead writer's saga is
taken over only after its lease, a paused writer finds the takeover before calling its tool,
and racing takers produce one hand-off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus, verify
from sagacity.errors import (
    ConfigurationError,
    LeaseHeldError,
    SagaFailedError,
    SagaNotLiveError,
    SerializationError,
    TailMovedError,
    WriterConflictError,
)
from sagacity.producer import ForkKind, KafkaJournal, Takeover

pytestmark = pytest.mark.kafka
JournalFactory = Callable[..., KafkaJournal]
WORKER = Path(__file__).with_name("lease_writer.py")


class Clock:
    """A monotonic clock a test moves forward (a paused process, without sleeping)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _later(seconds: float) -> Callable[[], float]:
    """A wall clock ``seconds`` ahead of the real one (a taker looking after the lease)."""
    return lambda: time.time() + seconds


def _open(journal: KafkaJournal, saga: str) -> None:
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}"))


def test_the_lease_is_recorded_and_a_too_short_lease_is_refused(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic, lease_ttl_s=45)
    saga = f"lease-{uuid.uuid4().hex[:8]}"
    _open(journal, saga)
    opened = journal.read(saga).entries[0]
    assert opened.attributes["lease_ttl_s"] == "45"
    with pytest.raises(ConfigurationError, match="must exceed twice ack_timeout_s"):
        journal_factory(topic, ack_timeout_s=10, lease_ttl_s=20)


def test_a_killed_writers_saga_is_taken_over_after_its_lease_and_not_before(
    kafka_bootstrap: str, topic: str, journal_factory: JournalFactory
) -> None:
    saga = f"lease-{uuid.uuid4().hex[:8]}"
    writer = subprocess.Popen(
        [sys.executable, str(WORKER), kafka_bootstrap, topic, saga, "30"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    try:
        assert writer.stdout is not None
        line = writer.stdout.readline()
        assert line, "the writer process died before journaling"
        started = json.loads(line)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        if writer.stdout is not None:
            writer.stdout.close()
    assert writer.returncode == -signal.SIGKILL

    now = journal_factory(topic, max_clock_skew_s=2)
    with pytest.raises(LeaseHeldError, match="may still be alive") as refused:
        now.take_over(saga, reason="writer killed")
    assert started["writer"] in refused.value.message
    with pytest.raises(WriterConflictError, match="is open by writer"):
        now.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    assert len(now.read(saga).entries) == 2  # nothing appended by the refusals

    # 33 s later on the taker's wall clock: past the 30 s lease and the 2 s skew allowance.
    late = journal_factory(topic, max_clock_skew_s=2, wall_clock=_later(33))
    done = late.take_over(saga, reason="writer killed", actor="operator:alice")
    assert not done.forced
    assert done.lease.writer == started["writer"]
    assert done.lease.last_seq == started["seq"] == 2
    assert done.lease.last_event_age_s >= 32
    read = late.read(saga)
    assert [e.event_type for e in read.entries] == [
        EventType.SAGA_OPENED,
        EventType.INTENT,
        EventType.COMPENSATION_REQUESTED,
    ]
    handoff = read.entries[-1]
    assert handoff.actor == "operator:alice"
    taken = dict(handoff.attributes)
    assert taken.pop("writer") not in ("", started["writer"])  # the taker's own id
    assert taken == {
        "abandoned_writer": started["writer"],
        "handoff": "takeover",
        "ref_seq": "1",
    }
    assert "writer killed" in (handoff.error or "")
    assert verify(read.entries).ok
    assert not read.ownership.live
    with pytest.raises(SagaNotLiveError, match="is not held by any writer"):
        late.take_over(saga, reason="again")


def test_a_writer_paused_past_its_lease_is_refused_before_its_tool_runs(
    topic: str, journal_factory: JournalFactory
) -> None:
    clock = Clock()
    journal = journal_factory(topic, ack_timeout_s=2, lease_ttl_s=30, monotonic=clock)
    agent = Sagacity(journal=journal, compensation="delegated")
    calls: list[str] = []

    @agent.wrap_tool
    def step(name: str) -> str:
        calls.append(name)
        return name

    saga = f"lease-{uuid.uuid4().hex[:8]}"
    taker = journal_factory(topic, max_clock_skew_s=1, wall_clock=_later(32))
    outcome: list[BaseException] = []

    def work() -> None:
        step("before the pause")
        clock.advance(31)  # the process stalls past its lease; meanwhile it is taken over
        taker.take_over(saga, reason="writer stalled")
        try:
            step("after the pause")
        except WriterConflictError as exc:
            outcome.append(exc)
        with pytest.raises(SagaFailedError, match="was taken over by another writer"):
            step("even if the agent carries on")

    result = agent.saga(saga, work)
    assert calls == ["before the pause"]
    (refusal,) = outcome
    assert "no longer held by this writer" in str(refusal)
    assert result.status is SagaStatus.COMPENSATION_PENDING
    assert "taken over by another writer" in (result.error or "")
    read = taker.read(saga)
    # The run journaled nothing after the hand-off: the taker's hand-off decides what follows.
    assert [e.event_type for e in read.entries] == [
        EventType.SAGA_OPENED,
        EventType.INTENT,
        EventType.EXECUTED,
        EventType.COMPENSATION_REQUESTED,
    ]
    assert verify(read.entries).ok
    assert not read.rejected


def test_within_its_lease_a_writer_needs_no_confirmation_and_a_forced_takeover_forks(
    topic: str, journal_factory: JournalFactory
) -> None:
    """The bound violated on purpose: the acceptance rule still accepts one chain only."""
    clock = Clock()
    writer = journal_factory(topic, ack_timeout_s=2, lease_ttl_s=30, monotonic=clock)
    saga = f"lease-{uuid.uuid4().hex[:8]}"
    _open(writer, saga)
    operator = journal_factory(topic)
    with pytest.raises(LeaseHeldError):
        operator.take_over(saga, reason="impatient")
    forced = operator.take_over(saga, reason="impatient", force=True)
    assert forced.forced
    clock.advance(20)  # still inside the 30 - (2 * 2 + 1) = 25 s the writer may go unconfirmed
    stale = writer.append(
        EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}")
    )
    read = operator.read(saga)
    assert read.entries[-1].hash == forced.entry.hash
    assert [(r.entry.hash, r.kind) for r in read.rejected] == [(stale.hash, ForkKind.FORK)]
    # Its acknowledgement renewed the lease (the writer cannot know it forked); once that lease
    # runs out too, the next append re-reads and finds the hand-off.
    clock.advance(26)
    with pytest.raises(WriterConflictError, match="no longer held by this writer"):
        writer.append(EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}"))


def test_a_writer_idle_beyond_its_lease_reconfirms_and_keeps_its_saga(
    topic: str, journal_factory: JournalFactory
) -> None:
    clock = Clock()
    writer = journal_factory(topic, ack_timeout_s=2, lease_ttl_s=30, monotonic=clock)
    saga = f"lease-{uuid.uuid4().hex[:8]}"
    _open(writer, saga)
    clock.advance(300)
    entry = writer.append(
        EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}")
    )
    read = writer.read(saga)
    assert [e.hash for e in read.entries][-1] == entry.hash
    assert read.ownership.writer == writer.writer_id
    assert not read.rejected


def test_two_takers_racing_one_wins(topic: str, journal_factory: JournalFactory) -> None:
    writer = journal_factory(topic, lease_ttl_s=30)
    saga = f"lease-{uuid.uuid4().hex[:8]}"
    _open(writer, saga)
    takers = [journal_factory(topic, wall_clock=_later(60)) for _ in range(2)]
    for taker in takers:
        taker.reader.read("warm-up")
    barrier = threading.Barrier(2)
    results: list[Takeover | BaseException] = []

    def take(journal: KafkaJournal) -> None:
        barrier.wait()
        try:
            results.append(journal.take_over(saga, reason="race"))
        except (TailMovedError, SagaNotLiveError) as exc:
            results.append(exc)

    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    won = [r for r in results if isinstance(r, Takeover)]
    lost = [r for r in results if not isinstance(r, Takeover)]
    assert (len(won), len(lost)) == (1, 1)
    read = writer.read(saga)
    handoffs = [e for e in read.entries if e.event_type is EventType.COMPENSATION_REQUESTED]
    assert [e.hash for e in handoffs] == [won[0].entry.hash]
    assert verify(read.entries).ok


def test_a_takeover_needs_a_reason_and_a_live_saga(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    with pytest.raises(SerializationError, match="needs a reason"):
        journal.take_over("any", reason="  ")
    with pytest.raises(SagaNotLiveError, match="has no events"):
        journal.take_over(f"lease-{uuid.uuid4().hex[:8]}", reason="why not")


def test_the_takeover_command_refuses_a_held_lease_and_takes_an_expired_one(
    kafka_bootstrap: str, topic: str, journal_factory: JournalFactory
) -> None:
    from click.testing import CliRunner

    from sagacity.cli import main

    # A short real lease (2.5 s, unconfirmed appends for 0.5 s) so expiry happens on the clock.
    writer = journal_factory(topic, ack_timeout_s=0.5, lease_ttl_s=2.5)
    held, forced = (f"lease-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for saga in (held, forced):
        _open(writer, saga)
    runner = CliRunner()
    env = {"SAGACITY_BOOTSTRAP_SERVERS": kafka_bootstrap, "SAGACITY_MAX_CLOCK_SKEW_S": "0.5"}
    args = ["saga", "takeover", "--topic", topic, "--reason", "host lost"]
    refused = runner.invoke(main, [*args, held], env=env)
    assert refused.exit_code == 1, refused.output
    assert "error: refused:" in refused.output
    assert "may still be alive" in refused.output
    assert len(writer.read(held).entries) == 2

    taken = runner.invoke(main, [*args, "--force", "--actor", "operator:bob", forced], env=env)
    assert taken.exit_code == 0, taken.output
    assert f"took over saga {forced!r} from writer {writer.writer_id!r} (forced)" in taken.output
    assert writer.read(forced).entries[-1].actor == "operator:bob"

    deadline = time.monotonic() + 30
    while True:
        expired = runner.invoke(main, [*args, held], env=env)
        if expired.exit_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert expired.exit_code == 0, expired.output
    assert "(forced)" not in expired.output
    assert "lease 2.5s" in expired.output
    handoff = writer.read(held).entries[-1]
    assert handoff.event_type is EventType.COMPENSATION_REQUESTED
    assert "host lost" in (handoff.error or "")

    unknown = runner.invoke(main, [*args, "no-such-saga"], env=env)
    assert unknown.exit_code == 1
    assert "has no events" in unknown.output
    no_broker = runner.invoke(main, [*args, held], env={"SAGACITY_BOOTSTRAP_SERVERS": ""})
    assert no_broker.exit_code == 2
    assert "SAGACITY_BOOTSTRAP_SERVERS is not set" in no_broker.output
