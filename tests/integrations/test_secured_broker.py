"""The journal, the three services and the CLI against a secured broker, really run.

``Stack.up(secure=True)`` (``sagacity dev up --secure``) in a state directory of the test's
own: SASL/SCRAM over TLS, one principal per role and the ACLs of docs/production-checklist.md.
An agent journals a saga as ``agents``; ``approvals`` approves and resumes its payment, which
fails; ``compensation`` cancels the booking; ``archive`` archives the chain; ``auditors`` verify
and replay it.  Then each principal is refused what its ACLs deny, with one clear line, fast.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from sagacity.dev import Stack, pick_free_port

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.integrations.travel_tools:travel"
SAGA = "trip-secured"
REFUSAL_S = 20.0
"""A refusal is reported within this (no retry loop, no ack timeout of a wait)."""

AGENT = """
import sys
from sagacity import Sagacity
from tests.integrations.travel_tools import Travel

agent = Sagacity.from_env()
tools = agent.wrap(Travel())
def work():
    tools.book("Oslo", "Ada Lovelace")
    tools.pay(2500)
result = agent.saga(sys.argv[1], work)
print(result.status.value, result.awaiting_seq)
"""


def principal_env(stack: Stack, name: str) -> dict[str, str]:
    """The ``SAGACITY_KAFKA_*`` settings of ``name``, read from its credentials file."""
    security = stack.security()
    assert security is not None
    found = {}
    for line in security.credentials_file(name).read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            [found[key]] = shlex.split(value)
    return found


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    stack = Stack(tmp_path_factory.mktemp("secured-stack"))
    endpoints = stack.up(kafka=True, postgres=False, secure=True)
    assert endpoints.bootstrap_servers is not None
    try:
        yield stack, endpoints.bootstrap_servers
    finally:
        stack.purge()


class Runner:
    """Commands and services as one principal or another; services stopped at the end."""

    def __init__(self, stack: Stack, bootstrap: str, dsn: str, tmp: Path) -> None:
        self.stack = stack
        self.tmp = tmp
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
        self.base.update(
            SAGACITY_BOOTSTRAP_SERVERS=bootstrap,
            SAGACITY_DATABASE_URL=dsn,
            PYTHONPATH=str(ROOT),
            SAGACITY_ALLOW_CLEAR_DATA="1",  # the principals' ACLs are the subject, in clear
        )
        self.services: list[tuple[subprocess.Popen[bytes], Path]] = []

    def env(self, principal: str) -> dict[str, str]:
        return {**self.base, **principal_env(self.stack, principal)}

    def run(self, principal: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env(principal),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def cli(self, principal: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(principal, "-c", "from sagacity.cli import main; main()", *args)

    def serve(self, principal: str, service: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{service}-{principal}.log"
        command = [sys.executable, "-c", "from sagacity.cli import main; main()", "serve"]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*command, service, *args],
                cwd=ROOT,
                env=self.env(principal),
                stdout=out,
                stderr=out,
            )
        self.services.append((proc, log))
        return proc

    def logs(self) -> str:
        return "\n".join(f"== {log.name}\n{log.read_text()[-2500:]}" for _p, log in self.services)

    def wait(self, what: str, check: Callable[[], object], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {timeout}s\n{self.logs()}")
            time.sleep(0.25)

    def stop(self) -> None:
        for proc, _log in self.services:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _log in self.services:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def runner(secured: tuple[Stack, str], pg_dsn: str, tmp_path: Path) -> Iterator[Runner]:
    stack, bootstrap = secured
    made = Runner(stack, bootstrap, pg_dsn, tmp_path)
    try:
        yield made
    finally:
        made.stop()


def test_the_journal_the_services_and_the_cli_run_as_their_principals(runner: Runner) -> None:
    agent = runner.run("agents", "-c", AGENT, SAGA)
    assert agent.returncode == 0, agent.stderr
    status, seq = agent.stdout.split()
    assert status == "AWAITING_APPROVAL"
    port = pick_free_port()
    approvals = ("--insecure-dev", "--tools", TOOLS, "--port", str(port))
    runner.serve("approvals", "approvals", *approvals)
    runner.serve("compensation", "compensation", "--tools", TOOLS, "--port", str(pick_free_port()))
    runner.serve("archive", "archive")
    url = f"http://127.0.0.1:{port}/sagacity"

    def pending() -> list[dict[str, object]]:
        try:
            found = httpx.get(f"{url}/approvals", timeout=2).json().get("requests", [])
        except (httpx.HTTPError, ValueError):
            return []
        return [r for r in found if r["saga_id"] == SAGA]

    runner.wait("the request reached the approvals service", pending)
    [request] = pending()
    approved = httpx.post(f"{url}/approve/{SAGA}/{seq}", json={"approver": "ops"}, timeout=30)
    assert approved.status_code == 200, approved.text
    resumed = httpx.post(f"{url}/resume/{SAGA}/{seq}", json={"payload": request["payload"]})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["saga_status"] == "COMPENSATION_PENDING"

    def ended() -> object:
        with psycopg.connect(runner.base["SAGACITY_DATABASE_URL"]) as conn:
            return conn.execute(
                "SELECT result FROM side_effect_journal WHERE saga_id = %s "
                "AND event_type = 'SAGA_ENDED' ORDER BY seq DESC LIMIT 1",
                (SAGA,),
            ).fetchone()

    runner.wait("the saga was compensated and archived", lambda: ended() == ("COMPENSATED",))
    verified = runner.cli("auditors", "verify", "--saga", SAGA)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replay = runner.cli("auditors", "replay", "--saga", SAGA)
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_an_auditor_cannot_write_the_journal(runner: Runner) -> None:
    began = time.monotonic()
    agent = runner.run("auditors", "-c", AGENT, "trip-by-an-auditor")
    assert time.monotonic() - began < REFUSAL_S
    assert agent.returncode != 0
    last = agent.stderr.strip().splitlines()[-1]
    assert last.startswith("sagacity.errors.KafkaAccessDeniedError: Kafka at "), agent.stderr
    assert "refused principal 'auditors' writing SAGA_OPENED" in last
    assert "CLUSTER_AUTHORIZATION_FAILED" in last


@pytest.mark.parametrize(
    ("service", "refused"),
    [
        ("archive", "as group 'sagacity-archive': not authorized for the consumer group"),
        ("approvals", "as group 'sagacity-approvals': not authorized for the consumer group"),
        ("compensation", "dead-letter topic 'sagacity.journal.dlq'"),
    ],
)
def test_an_agent_cannot_act_as_a_service(runner: Runner, service: str, refused: str) -> None:
    args = {
        "archive": (),
        "approvals": ("--insecure-dev", "--tools", TOOLS, "--port", str(pick_free_port())),
        "compensation": ("--tools", TOOLS, "--port", str(pick_free_port())),
    }[service]
    began = time.monotonic()
    done = runner.cli("agents", "serve", service, *args)
    assert time.monotonic() - began < REFUSAL_S
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Kafka at "), done.stderr
    assert "refused principal 'agents'" in last
    assert refused in last
