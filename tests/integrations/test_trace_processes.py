"""One trace across three processes: an agent, ``sagacity serve approvals`` and ``sagacity
serve compensation``, each exporting its spans over OTLP/HTTP to a receiver on the loopback
(and ``sagacity serve archive``, whose batches link to the traces of their events).

The agent books a room and asks to pay (gated); the approvals service approves and resumes the
payment, which fails, so the saga is handed to the compensation service, which cancels the
booking.  The decision spans continue the request event's trace (the ``traceparent`` header the
agent's journal wrote), the compensation continues the ``COMPENSATION_REQUESTED``'s: one trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sagacity.dev import pick_free_port
from tests.integrations.otlp_receiver import OtlpReceiver, ReceivedSpan

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.integrations.travel_tools:travel"
SAGA = "trip-traced"

AGENT = f"""
from sagacity import Sagacity
from tests.integrations.travel_tools import Travel

agent = Sagacity.from_env()
tools = agent.wrap(Travel())
def work():
    tools.book("Oslo", "Ada Lovelace")
    tools.pay(2500)
result = agent.saga({SAGA!r}, work)
assert result.status.value == "AWAITING_APPROVAL", result
print(result.awaiting_seq)
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sagacity.cli import main; main()", *args]


class Processes:
    """The services started for one test, stopped (SIGTERM: their spans are flushed) at its end."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=out)
        self.started.append((proc, log))
        return proc

    def logs(self) -> str:
        return "\n".join(f"== {log.name}\n{log.read_text()[-3000:]}" for _p, log in self.started)

    def stop(self) -> None:
        for proc, _log in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _log in self.started:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    try:
        yield found
    finally:
        found.close()


def _wait(
    what: str, check: Callable[[], object], processes: Processes, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s\n{processes.logs()}")
        time.sleep(0.2)


def test_an_agents_call_its_approval_and_its_undo_are_one_trace(
    receiver: OtlpReceiver,
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "OTEL_"))}
    env.update(
        SAGACITY_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SAGACITY_TOPIC=make_topic(partitions=1),
        SAGACITY_DATABASE_URL=pg_dsn,
        SAGACITY_COMPENSATION_GROUP=f"compensation-{tmp_path.name}",
        SAGACITY_APPROVALS_GROUP=f"approvals-{tmp_path.name}",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
        PYTHONPATH=str(ROOT),
        # Sealed, as a deployment runs: the session's key-encryption key.
        SAGACITY_KEY_ENCRYPTION_KEY_FILE=os.environ["SAGACITY_KEY_ENCRYPTION_KEY_FILE"],
    )
    processes = Processes(env, tmp_path)
    try:
        agent = subprocess.run(
            [sys.executable, "-c", AGENT],
            cwd=ROOT,
            env={**env, "OTEL_SERVICE_NAME": "travel-agent"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert agent.returncode == 0, agent.stderr
        seq = int(agent.stdout.strip().splitlines()[-1])
        port = pick_free_port()
        processes.start(
            "approvals",
            _cli("serve", "approvals", "--insecure-dev", "--tools", TOOLS, "--port", str(port)),
        )
        processes.start(
            "compensation",
            _cli("serve", "compensation", "--tools", TOOLS, "--port", str(pick_free_port())),
        )
        processes.start("archive", _cli("serve", "archive"))
        url = f"http://127.0.0.1:{port}/sagacity"

        def pending() -> list[dict[str, object]]:
            try:
                found = httpx.get(f"{url}/approvals", timeout=2).json().get("requests", [])
            except (httpx.HTTPError, ValueError):
                return []
            return [r for r in found if r["saga_id"] == SAGA]

        _wait("the request reached the approvals service", pending, processes)
        [request] = pending()
        approved = httpx.post(
            f"{url}/approve/{SAGA}/{seq}", json={"approver": "manager"}, timeout=30
        )
        assert approved.status_code == 200, approved.text
        resumed = httpx.post(
            f"{url}/resume/{SAGA}/{seq}", json={"payload": request["payload"]}, timeout=30
        )
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["saga_status"] == "COMPENSATION_PENDING"  # the payment failed

        def undone() -> bool:
            return any(s.name == "undo book" for s in receiver.received())

        _wait("the compensation service's undo span arrived", undone, processes, timeout=90)

        def archived() -> list[ReceivedSpan]:
            return [s for s in receiver.received() if s.name == "archive batch"]

        _wait("the archive's batch span arrived", archived, processes, timeout=60)
    finally:
        processes.stop()
    ours = [s for s in receiver.received() if s.attributes.get("sagacity.saga.id") == SAGA]
    spans = {(s.service, s.name): s for s in ours}
    agent_, approvals, compensation = "travel-agent", "sagacity-approvals", "sagacity-compensation"
    expected = {
        (agent_, "saga"),
        (agent_, "execute_tool book"),
        (agent_, "execute_tool pay"),
        (agent_, "request_approval pay"),
        (approvals, "approve pay"),
        (approvals, "resume pay"),
        (approvals, "execute_tool pay"),  # the approved call, made by the resume
        (compensation, "compensate"),
        (compensation, "undo book"),
    }
    assert set(spans) == expected
    assert len(ours) == len(expected)
    assert len({s.trace_id for s in ours}) == 1

    def parent(service: str, name: str) -> tuple[str, str]:
        found = next(s for s in ours if s.span_id == spans[service, name].parent_id)
        return found.service, found.name

    assert parent(agent_, "request_approval pay") == (agent_, "execute_tool pay")
    assert parent(approvals, "approve pay") == (agent_, "request_approval pay")
    assert parent(approvals, "resume pay") == (agent_, "request_approval pay")
    assert parent(approvals, "execute_tool pay") == (approvals, "resume pay")
    assert parent(compensation, "compensate") == (approvals, "resume pay")
    assert parent(compensation, "undo book") == (compensation, "compensate")
    assert spans[approvals, "resume pay"].attributes["sagacity.seq"] == seq
    resumed = spans[approvals, "execute_tool pay"].attributes
    assert (resumed["sagacity.outcome"], resumed["error.type"]) == ("failed", "RuntimeError")
    assert spans[compensation, "undo book"].attributes["sagacity.outcome"] == "compensated"
    # The archive's batches are traces of their own, linked to the traces of their events.
    batches = [s for s in receiver.received() if s.name == "archive batch"]
    assert {s.service for s in batches} == {"sagacity-archive"}
    assert all(not s.parent_id for s in batches)
    assert any(ours[0].trace_id in s.links for s in batches)
    assert sum(int(s.attributes["sagacity.archive.archived"]) for s in batches) >= 1
    for span in receiver.received():
        flat = " ".join(str(v) for v in span.attributes.values())
        assert "Ada Lovelace" not in flat
        assert "Oslo" not in flat
