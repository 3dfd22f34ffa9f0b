"""An instance expelled from the group while it works (``on_lost``), on a real broker.

The working instance is frozen (SIGSTOP) in the middle of an undo for longer than the session
timeout, so the broker hands its partition to the other instance.  When it thaws, librdkafka
reports the partition lost; the saga lock kept the new owner off the saga meanwhile, and every
step is still undone exactly once.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from sagacity import EventType, SagaStatus, verify
from sagacity.producer import KafkaJournal
from tests.compensation.conftest import Lane, ServiceProcess
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType
SESSION_MS = 6000  # the broker's default group.min.session.timeout.ms


def _until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _logged(service: ServiceProcess, prefix: str) -> bool:
    return any(r.get("msg", "").startswith(prefix) for r in service.records())


def test_an_instance_that_loses_its_partition_mid_undo_never_doubles_a_step(
    make_lane: Callable[..., Lane],
) -> None:
    lane = make_lane(partitions=1)
    session = ("--session-timeout-ms", str(SESSION_MS), "--concurrency", "1")
    first = lane.start(*session, SVC_TOOLS_SLOW_S="2")
    _until(
        lambda: _logged(first, "assigned partitions [0]"),
        "the first instance never got the partition",
    )
    second = lane.start(*session, SVC_TOOLS_SLOW_S="2")
    agent = lane.agent()
    saga = f"lost-{uuid.uuid4().hex[:8]}"
    fail_after(
        agent,
        saga,
        ("charge", {"order": "l1", "amount": 5}),
        ("reserve", {"order": "l1", "item": "lamp"}),
        ("ship", {"order": "l1"}),
    )
    # The first instance owns the only partition: it starts the newest step's undo.
    _until(lambda: len(lane.calls()) >= 1, "no undo began", timeout=30)
    first.proc.send_signal(signal.SIGSTOP)
    try:
        # Frozen past the session timeout: the broker gives the partition to the second one,
        # which must wait for the saga lock the frozen instance still holds.
        _until(
            lambda: _logged(second, "assigned partitions [0]"),
            "the partition never moved to the second instance",
            timeout=SESSION_MS / 1000 + 30,
        )
        time.sleep(1.0)
        assert len(lane.calls()) == 1, lane.calls()  # nobody else touched the saga meanwhile
    finally:
        first.proc.send_signal(signal.SIGCONT)
    _until(lambda: _logged(first, "lost partitions"), "on_lost was never reported", timeout=30)
    result = agent.wait_for_outcome(saga, timeout=90)
    assert result.status is SagaStatus.COMPENSATED, result.summary()
    read = KafkaJournal(lane.bootstrap, topic=lane.topic)
    lane.journals.append(read)
    chain = read.read(saga)
    assert verify(chain.entries, saga_id=saga).ok
    assert not chain.forks, chain.forks
    assert not [e for e in chain.entries if e.event_type is E.SUSPECT]
    seq = {e.tool: e.seq for e in chain.entries if e.event_type is E.EXECUTED}
    once = Counter({(saga, seq[t], t): 1 for t in ("charge", "reserve", "ship")})
    assert Counter(lane.calls()) == once  # not one undo called twice
    assert Counter(lane.effects()) == once
    outcomes = Counter(e.ref_seq for e in chain.entries if e.event_type is E.COMPENSATED)
    assert outcomes == Counter({seq[t]: 1 for t in ("charge", "reserve", "ship")})
    # The thawed instance is still a healthy member and keeps working for the group.
    _until(lambda: first.get("/healthz")[0] == 200, "the thawed instance is unhealthy")
    later = f"lost-after-{uuid.uuid4().hex[:8]}"
    fail_after(agent, later, ("charge", {"order": "l2", "amount": 1}))
    assert agent.wait_for_outcome(later, timeout=60).status is SagaStatus.COMPENSATED
    assert first.terminate() == 0
    assert second.terminate() == 0
