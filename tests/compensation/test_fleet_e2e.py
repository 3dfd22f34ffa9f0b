"""A fleet end to end: agent processes writing sagas to one topic at once, the compensation
service undoing the failed ones, the archive service keeping the evidence, and an auditor's
``verify`` and ``replay`` over the result — every process real, on the real broker and
database."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import EventType, SagaStatus, verify
from sagacity.consumers.archive import generate_key
from sagacity.producer import KafkaJournal
from tests.compensation.conftest import ROOT, Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]
AGENTS, SAGAS_EACH = 3, 8


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sagacity.cli", *args]


def _archived_heads(dsn: str) -> dict[str, tuple[int, str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT saga_id, head_seq, head_hash FROM archive_saga_head").fetchall()
    return {str(s): (int(n), str(h)) for s, n, h in rows}


def test_a_fleet_of_agent_processes_leaves_compensated_sagas_and_verified_evidence(
    make_lane: Callable[..., Lane], tmp_path: Path
) -> None:
    lane = make_lane(partitions=3)
    group = f"archive-{uuid.uuid4().hex[:8]}"
    signer = generate_key(tmp_path / "archive.key")
    archive_log = (tmp_path / "archive.log").open("wb")
    archive = subprocess.Popen(
        [
            *_cli("serve", "archive"),
            "--bootstrap-servers", lane.bootstrap,
            "--database-url", lane.dsn,
            "--topic", lane.topic,
            "--group", group,
            "--batch-size", "100",
            "--signing-key", str(tmp_path / "archive.key"),
            "--checkpoint-interval", "1",
        ],
        env=lane.env(),
        cwd=ROOT,
        stdout=archive_log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # The compensation service reads sagas through the archive (its read index).
        service = lane.start(SAGACITY_ARCHIVE_GROUP=group)
        run = uuid.uuid4().hex[:6]
        agents = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.compensation.fleet_agent",
                    lane.bootstrap,
                    lane.topic,
                    lane.dsn,
                    f"fleet{i}-{run}",
                    str(SAGAS_EACH),
                ],
                env=lane.env(),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(AGENTS)
        ]
        statuses: dict[str, str] = {}
        for agent in agents:
            out, err = agent.communicate(timeout=180)
            assert agent.returncode == 0, err.decode(errors="replace")
            statuses.update(json.loads(out))
        assert len(statuses) == AGENTS * SAGAS_EACH
        failed = sorted(s for s, status in statuses.items() if status != "COMPLETED")
        assert Counter(statuses.values()) == {
            "COMPLETED": AGENTS * SAGAS_EACH // 2,
            SagaStatus.COMPENSATION_PENDING.value: AGENTS * SAGAS_EACH // 2,
        }

        watcher = lane.agent()
        for saga in failed:
            assert watcher.wait_for_outcome(saga, timeout=120).status is SagaStatus.COMPENSATED
        reader = KafkaJournal(lane.bootstrap, topic=lane.topic)
        lane.journals.append(reader)
        chains = {saga: reader.read(saga) for saga in statuses}
        expected: Counter[tuple[str, int, str]] = Counter()
        for saga, read in chains.items():
            assert verify(read.entries, saga_id=saga).ok, saga
            assert not read.forks, read.forks
            if saga in failed:
                for e in read.entries:
                    if e.event_type is EventType.EXECUTED:
                        expected[(saga, e.seq, str(e.tool))] += 1
        # Each step of each failed saga undone once, whichever process ran it.
        assert Counter(lane.effects()) == expected
        assert len(expected) == 2 * len(failed)

        # The archive catches up with the topic: every chain, to its last event.
        tails = {
            saga: (read.entries[-1].seq, read.entries[-1].hash) for saga, read in chains.items()
        }
        deadline = time.monotonic() + 60
        while {s: h for s, h in _archived_heads(lane.dsn).items() if s in tails} != tails:
            assert time.monotonic() < deadline, "the archive did not catch up with the topic"
            time.sleep(0.2)
        assert service.terminate() == 0
        archive.send_signal(signal.SIGTERM)
        assert archive.wait(timeout=60) == 0  # signs the last heads on the way out
    finally:
        if archive.poll() is None:
            archive.kill()
        archive_log.close()

    audited = subprocess.run(
        [*_cli("verify"), "--all", "--database-url", lane.dsn,
         "--public-key", signer.public_hex],
        env=lane.env(), cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert audited.returncode == 0, audited.stdout + audited.stderr
    replayed = subprocess.run(
        [*_cli("replay"), "--database-url", lane.dsn,
         "--bootstrap-servers", lane.bootstrap, "--topic", lane.topic],
        env=lane.env(), cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert re.search(rf"sagas ok +{AGENTS * SAGAS_EACH}$", audited.stdout, re.M), audited.stdout
    assert re.search(r"sagas differing +0$", replayed.stdout, re.M), replayed.stdout
