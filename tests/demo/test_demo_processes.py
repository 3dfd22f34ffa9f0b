"""The demo's sagas across processes on the real stack: the agent process on the Kafka journal
(compensation delegated), the compensation service in its own process, effects in PostgreSQL.

The approval decisions are made from the test process through the core API, as the approvals
service would.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import Sagacity, SagaStatus
from sagacity.demo import tools
from sagacity.errors import PayloadMismatchError
from sagacity.producer import KafkaJournal

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def world(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    approvals_key: Any,
) -> Iterator[dict[str, Any]]:
    tools.prepare(pg_dsn)
    # The resumed tool runs in this process, as it would in the approvals service.
    monkeypatch.setenv("SAGACITY_DEMO_DATABASE_URL", pg_dsn)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
    env.update(
        SAGACITY_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SAGACITY_DATABASE_URL=pg_dsn,
        SAGACITY_DEMO_DATABASE_URL=pg_dsn,
        SAGACITY_TOPIC=make_topic(partitions=3),
        SAGACITY_COMPENSATION_GROUP=f"demo-{tmp_path.name}",
        PYTHONPATH=str(ROOT),
        SAGACITY_ALLOW_CLEAR_DATA="1",  # in clear, said so (`sagacity demo` runs sealed)
    )
    port = _free_port()
    log = tmp_path / "compensation.log"
    with log.open("wb") as out:
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sagacity.cli",
                "serve",
                "compensation",
                "--tools",
                "sagacity.demo.tools:TOOLS",
                "--port",
                str(port),
                "--handoff-grace",
                "2",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    journal = KafkaJournal(kafka_bootstrap, topic=env["SAGACITY_TOPIC"])
    try:
        deadline = time.monotonic() + 90
        while True:
            assert service.poll() is None, log.read_text(errors="replace")
            url = f"http://127.0.0.1:{port}/readyz"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    break
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        decider = Sagacity(journal, compensation="delegated", decision_signer=approvals_key)
        for tool in tools.TOOLS:
            decider.wrap(tool)
        yield {"env": env, "dsn": pg_dsn, "decider": decider, "log": log}
    finally:
        service.kill()
        service.wait(timeout=30)
        with contextlib.suppress(Exception):
            journal.close()


def agent(world: dict[str, Any], scenario: str, saga_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "sagacity.demo.agent", scenario, saga_id],
        env=world["env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_three_demo_sagas_across_processes(world: dict[str, Any]) -> None:
    decider: Sagacity = world["decider"]

    # 1. Completes through an approval.
    assert agent(world, "confirmed", "order-ok")["status"] == "AWAITING_APPROVAL"
    [request] = decider.pending_approvals("order-ok")
    decider.approve("order-ok", request.seq, "manager@example.com")
    assert decider.resume_saga("order-ok", request.seq, request.payload).status is (
        SagaStatus.COMPLETED
    )

    # 2. Fails at create_order; the compensation service releases the reservation.
    assert agent(world, "failed", "order-bad")["status"] == "COMPENSATION_PENDING"
    outcome = decider.wait_for_outcome("order-bad", timeout=90)
    assert outcome.status is SagaStatus.COMPENSATED, world["log"].read_text(errors="replace")

    # 3. The stale-approval attack: approved for alice, resumed for mallory: refused.
    assert agent(world, "wire", "pay-1")["status"] == "AWAITING_APPROVAL"
    [wire] = decider.pending_approvals("pay-1")
    decider.approve("pay-1", wire.seq, "manager@example.com")
    with pytest.raises(PayloadMismatchError):
        decider.resume_saga("pay-1", wire.seq, '{"amount":"999999","to":"mallory"}')
    # The refusal hands the reservation made before the gate to the compensation service.
    refused = decider.wait_for_outcome("pay-1", timeout=90)
    assert refused.status is SagaStatus.COMPENSATED, world["log"].read_text(errors="replace")

    after = tools.snapshot(world["dsn"])
    assert after.stock == {"p-1": 8, "p-2": 5}
    assert after.reservations == {"res-1": "held", "res-2": "released", "res-3": "released"}
    assert after.orders == {"order-1": "placed"}
    assert after.emails == [("order-1", "customer@example.com")]
    assert after.wires == []
