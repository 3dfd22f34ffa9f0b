"""``kill -9`` at randomized points, then restart: every step undone exactly once.

Four lanes run in parallel on the one broker (each its own topic, group and schema).  In each,
twelve failed sagas wait for compensation (enough work that a lane seldom finishes before its
kills are spent); the service is started, held at a randomly chosen failpoint (or killed after
a random delay while an undo sleeps), killed with SIGKILL, and started again, until seven kills
landed (at most eleven tries); a last run finishes the work.  The verdict is counted from the
side effects the tools wrote to Postgres:

* idempotent compensations (``refund``, ``unship``): exactly one effect per step;
* the non-idempotent one (``release``): never called twice; when its outcome is unknown (killed
  between its claim and the claim's result) the chain says ``SUSPECT`` for a person and the
  saga ends ``COMPENSATION_FAILED`` naming it; otherwise exactly one effect;
* every saga ends, and its chain verifies.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from sagacity import EventType, SagaStatus, verify
from sagacity.consumers.compensation._failpoints import POINTS
from sagacity.producer import KafkaJournal
from sagacity.saga._outcome import outcome_from_chain
from tests.compensation.conftest import Lane
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
E = EventType
SEED = 20261202
LANES = 4
KILLS_PER_LANE = 7
# A held failpoint the remaining work never reaches kills nothing ("-"): another is drawn.
MAX_ATTEMPTS_PER_LANE = 11
SAGAS_PER_LANE = 12


def _all_ended(journal: KafkaJournal, sagas: list[str]) -> bool:
    for saga in sagas:
        outcome = outcome_from_chain(journal.entries(saga))
        if outcome is None or outcome.status is SagaStatus.COMPENSATION_PENDING:
            return False
    return True


def _run_lane(lane: Lane, index: int) -> list[str]:
    rng = random.Random(SEED + index)
    agent = lane.agent()
    sagas = [f"kill-{index}-{n}-{uuid.uuid4().hex[:6]}" for n in range(SAGAS_PER_LANE)]
    for n, saga in enumerate(sagas):
        fail_after(
            agent,
            saga,
            ("charge", {"order": f"o{n}", "amount": 10 + n}),
            ("reserve", {"order": f"o{n}", "item": "lamp"}),
            ("ship", {"order": f"o{n}"}),
        )
    reader = KafkaJournal(lane.bootstrap, topic=lane.topic)
    lane.journals.append(reader)
    kills: list[str] = []
    for _ in range(MAX_ATTEMPTS_PER_LANE):
        realised = sum(k != "-" for k in kills)
        if realised >= KILLS_PER_LANE or _all_ended(reader, sagas):
            break
        slow = "0.3"
        if rng.random() < 0.25:
            # A kill at a random moment, most likely while an undo sleeps after its effect.
            service = lane.start("--instance-id", "replica-0", SVC_TOOLS_SLOW_S=slow)
            delay = rng.uniform(0.05, 1.5)
            time.sleep(delay)
            kills.append(f"timer:{delay:.2f}")
        else:
            point = rng.choice(POINTS)
            arrival = rng.randint(1, 3)
            service = lane.start(
                "--instance-id",
                "replica-0",
                failpoint=f"{point}:{arrival}",
                SVC_TOOLS_SLOW_S=slow,
                wait=False,
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if service.marker is not None and service.marker.exists():
                    break
                assert service.proc.poll() is None, service.logs()
                if _all_ended(reader, sagas):
                    break
                time.sleep(0.05)
            kills.append(
                f"{point}:{arrival}" if service.marker and service.marker.exists() else "-"
            )
        service.kill()
    final = lane.start("--instance-id", "replica-0")
    deadline = time.monotonic() + 90
    while not _all_ended(reader, sagas):
        assert time.monotonic() < deadline, final.logs()
        time.sleep(0.1)
    assert final.terminate() == 0
    _check_lane(lane, reader, sagas)
    return kills


def _check_lane(lane: Lane, reader: KafkaJournal, sagas: list[str]) -> None:
    calls = Counter(lane.calls())
    effects = Counter(lane.effects())
    for saga in sagas:
        read = reader.read(saga)
        chain = read.entries
        assert verify(chain, saga_id=saga).ok
        outcome = outcome_from_chain(chain)
        assert outcome is not None
        executed = {e.tool: e.seq for e in chain if e.event_type is E.EXECUTED}
        last = {}
        for entry in chain:
            if entry.ref_seq is not None and entry.event_type in (
                E.COMPENSATED,
                E.COMPENSATION_FAILED,
                E.SUSPECT,
            ):
                last[entry.ref_seq] = entry.event_type
        for tool in ("charge", "ship"):
            step = (saga, executed[tool], tool)
            assert effects[step] == 1, (step, effects[step], calls[step])
            assert last[executed[tool]] is E.COMPENSATED
        step = (saga, executed["reserve"], "reserve")
        # A kill inside the undo may land between its call row and its effect row.
        assert effects[step] <= calls[step] <= 1, (step, effects[step], calls[step])
        if last[executed["reserve"]] is E.COMPENSATED:
            assert effects[step] == 1
            assert outcome.status is SagaStatus.COMPENSATED
        else:
            assert last[executed["reserve"]] is E.SUSPECT
            assert outcome.status is SagaStatus.COMPENSATION_FAILED
            assert [s.seq for s in outcome.suspects] == [executed["reserve"]]
            ended = chain[-1]
            assert ended.event_type is E.SAGA_ENDED
            assert f"seq {executed['reserve']} reserve" in ended.attributes["dirty"]


def test_kill_matrix_every_step_undone_exactly_once(make_lane: Callable[..., Lane]) -> None:
    lanes = [make_lane(partitions=2) for _ in range(LANES)]
    with ThreadPoolExecutor(max_workers=LANES) as pool:
        kills = list(pool.map(_run_lane, lanes, range(LANES)))
    points = [k for lane_kills in kills for k in lane_kills if k != "-"]
    print("kill points:", kills)
    assert len(points) >= 20, kills
