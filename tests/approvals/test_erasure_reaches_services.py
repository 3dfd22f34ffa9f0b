"""After ``sagacity erase --apply`` no running reader serves the erased values past the bound
docs/operations/erasure.md states: the key cache's TTL (``SAGACITY_KEY_CACHE_TTL_S``, here a
few seconds), sooner where the process reads the saga's ``ERASED`` from the topic.  Real Kafka
and PostgreSQL; the approvals service (API and console) and the MCP server in their own
processes, the compensation service in this one (its journals are looked into directly: it
answers nothing that carries a saga's data)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from sagacity import Sagacity, SagaStatus, compose
from sagacity.cli import main
from sagacity.consumers.compensation import CompensationService, CompensationSettings
from sagacity.postgres import PostgresKeyStore
from sagacity.postgres.archive import migrate
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KEY_CACHE_TTL_SETTING, KeyService
from sagacity.producer import KafkaJournal
from sagacity.signing._operator_signature import generate_key as generate_operator_key

from ._process import REPO
from .conftest import TOKENS, bearer, shown
from .test_processes import Deployment, listed, wait_for
from .tools import Bank, calls

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

MARKER = "Erika-Mustermann-DE89370400440532013000"
"""A name and an IBAN: the personal data the erasure must take from every reader."""
TTL_S = 6.0
"""The key cache TTL the services run with: the bound of docs/operations/erasure.md."""
SLACK_S = 1.5
"""What a request in flight may add to the bound when it is measured from outside."""
PAYLOAD = json.dumps({"amount": "100", "to": MARKER}, separators=(",", ":"))


@pytest.fixture
def erasable(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Deployment]:
    """A sealed deployment (KEK, archive, operator key) whose services keep keys ``TTL_S``."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)  # the archive an erasure clears
    d = Deployment(kafka_bootstrap, make_topic(partitions=3), pg_dsn, auth_file, tmp_path)
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(d.calls))
    kek = tmp_path / "journal.kek"
    write_key_encryption_key(kek)
    operator = generate_operator_key(tmp_path / "operator.pem")
    d.env.update(
        {
            KEK_SETTING: str(kek),
            KEY_CACHE_TTL_SETTING: str(TTL_S),
            "SAGACITY_OPERATOR_PUBLIC_KEY": operator.public_hex,
        }
    )
    keys = KeyService(PostgresKeyStore(pg_dsn), KeyRing.from_setting(str(kek)))
    d.journal.close()
    d.journal = KafkaJournal(kafka_bootstrap, topic=d.env["SAGACITY_TOPIC"], keys=keys)
    d.agent = Sagacity(
        d.journal,
        compensation="delegated",
        approvals_public_key=d.env["SAGACITY_APPROVALS_PUBLIC_KEY"],
    )
    d.bank = d.agent.wrap(Bank())
    try:
        yield d
    finally:
        d.close()
        keys.close()


def _erase(d: Deployment, saga_id: str) -> float:
    """``sagacity erase --apply`` the saga; when it returned (monotonic)."""
    env = {**d.env, "SAGACITY_OPERATOR_SIGNING_KEY": str(d.tmp / "operator.pem")}
    result = CliRunner().invoke(
        main, ["erase", "--saga", saga_id, "--reason", "art. 17 #4711", "--apply"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "ERASED appended" in result.output
    return time.monotonic()


def _gone_within_bound(answers: Callable[[], dict[str, str]], erased_at: float) -> float:
    """Poll ``answers`` until none holds the marker; how long after the erasure that was.
    Fails once the bound (and the slack of a request in flight) has passed."""
    while True:
        holding = sorted(name for name, text in answers().items() if MARKER in text)
        elapsed = time.monotonic() - erased_at
        if not holding:
            print(f"erased values gone from every answer {elapsed:.2f}s after the erasure")
            return elapsed
        assert elapsed <= TTL_S + SLACK_S, (
            f"{holding} still serve the erased values {elapsed:.1f}s after the erasure"
        )
        time.sleep(0.2)


def _console(url: str, who: str) -> httpx.Client:
    browser = httpx.Client(base_url=url, timeout=10)
    form = browser.get("/ui/login")
    found = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert found is not None, form.text
    signed_in = browser.post(
        "/ui/login", data={"csrf": found.group(1), "token": TOKENS[who], "next": "/ui/"}
    )
    assert signed_in.status_code in (200, 303), signed_in.text
    return browser


def test_the_approvals_api_and_console_serve_no_erased_value_past_the_bound(
    erasable: Deployment,
) -> None:
    d = erasable
    replica = d.replica()
    replica.wait_ready()
    saga = "erase-wire"

    def work() -> None:
        d.bank.reserve_inventory("SKU-9")
        d.bank.send_wire_transfer("100", MARKER)

    gated = d.agent.saga(saga, work)
    assert gated.awaiting_seq is not None
    seq = gated.awaiting_seq
    wait_for(lambda: listed(replica))
    url = replica.url
    assert httpx.post(
        f"{url}/sagacity/approve/{saga}/{seq}", json=shown(url, saga, seq), headers=bearer("alice")
    ).is_success
    done = httpx.post(
        f"{url}/sagacity/resume/{saga}/{seq}",
        json={"payload": PAYLOAD},
        headers=bearer("alice"),
        timeout=30,
    )
    assert done.status_code == 200, done.text
    assert done.json()["saga_status"] == "COMPLETED"
    browser = _console(url, "bob")

    def answers() -> dict[str, str]:
        return {
            "API saga": httpx.get(f"{url}/sagacity/sagas/{saga}", headers=bearer("bob")).text,
            "API request": httpx.get(
                f"{url}/sagacity/approvals/{saga}/{seq}", headers=bearer("bob")
            ).text,
            "console saga": browser.get(f"/ui/sagas/{saga}").text,
            "console request": browser.get(f"/ui/requests/{saga}/{seq}").text,
        }

    try:
        before = answers()
        assert all(MARKER in text for text in before.values()), before
        erased_at = _erase(d, saga)
        elapsed = _gone_within_bound(answers, erased_at)
        # The replica reads the saga's ERASED from the topic: it forgets at once, far inside
        # the bound, and serves the saga as erased from then on.
        assert elapsed <= TTL_S
        for _ in range(3):
            assert all(MARKER not in text for text in answers().values())
            time.sleep(0.3)
        page = answers()["console saga"]
        assert "erase-wire" in page
    finally:
        browser.close()


def test_the_compensation_services_journals_forget_an_erased_saga(
    erasable: Deployment,
) -> None:
    d = erasable
    settings = CompensationSettings(
        bootstrap_servers=d.env["SAGACITY_BOOTSTRAP_SERVERS"],
        database_url=d.env["SAGACITY_DATABASE_URL"],
        topic=d.env["SAGACITY_TOPIC"],
        group_id=f"compensation-{d.env['SAGACITY_TOPIC']}",
        handoff_grace_s=1,
        concurrency=1,
    )
    keys = KeyService(
        PostgresKeyStore(d.env["SAGACITY_DATABASE_URL"]),
        KeyRing.from_setting(d.env[KEK_SETTING]),
        cache_ttl=TTL_S,
    )
    handed = compose.compensation_of(settings, keys=keys)
    service = CompensationService(settings, register=lambda s: s.wrap(Bank()), dependencies=handed)
    runner = threading.Thread(target=service.run, name="compensation-under-test")
    runner.start()
    saga = "erase-undone"

    def work() -> None:
        d.bank.reserve_inventory(MARKER)
        raise RuntimeError("the bank is closed")

    try:
        assert d.agent.saga(saga, work).status is SagaStatus.COMPENSATION_PENDING
        assert d.agent.wait_for_outcome(saga, timeout=60).status is SagaStatus.COMPENSATED
        [released] = [c for c in calls(d.calls) if c["tool"] == "release_inventory"]
        assert released["sku"] == MARKER  # the service opened the sealed call to undo it

        def answers() -> dict[str, str]:
            # What a job of each worker would read of the saga: what the service holds.
            journals = list(service._journals)  # the service's own readers
            assert journals
            return {
                f"journal {i}": json.dumps([e.to_dict() for e in j.read(saga).entries])
                for i, j in enumerate(journals)
            }

        assert any(MARKER in text for text in answers().values())
        erased_at = _erase(d, saga)
        assert _gone_within_bound(answers, erased_at) <= TTL_S
    finally:
        service.stop()
        runner.join(60)
        keys.close()
    assert not runner.is_alive()


def test_the_mcp_servers_answers_hold_no_erased_value_past_the_bound(
    erasable: Deployment, auth_file: Path
) -> None:
    """The MCP server reads the topic for its calls but consumes no group: what it opened
    goes with the key cache's TTL."""
    from sagacity.dev import pick_free_port
    from tests.mcp_server.conftest import SERVE, http_session, wait_http

    d = erasable
    saga = "erase-mcp"
    assert d.agent.saga(saga, lambda: d.bank.reserve_inventory(MARKER)).status is (
        SagaStatus.COMPLETED
    )
    port = pick_free_port()
    log = (d.tmp / "mcp.log").open("ab")
    process = subprocess.Popen(
        [
            *SERVE,
            "--tools",
            "tests.approvals.erasure_tools:Desk",
            "--transport",
            "http",
            "--port",
            str(port),
            "--auth",
            str(auth_file),
            "--idle-timeout",
            "120",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        env={**os.environ, **d.env, "PYTHONPATH": str(REPO)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    async def conversation() -> float:
        async with http_session(url, "agent") as session:

            async def probe() -> str:
                answer: Any = await session.call_tool("saga_data", {"saga_id": saga})
                assert answer.is_error is False, answer
                return "".join(getattr(c, "text", "") for c in answer.content)

            assert MARKER in await probe()
            erased_at = await asyncio.to_thread(_erase, d, saga)
            while True:
                text = await probe()
                elapsed = time.monotonic() - erased_at
                if MARKER not in text:
                    print(f"MCP: erased values gone {elapsed:.2f}s after the erasure")
                    return elapsed
                assert elapsed <= TTL_S + SLACK_S, (
                    f"the MCP server still answers with the erased values {elapsed:.1f}s after"
                )
                await asyncio.sleep(0.2)

    try:
        wait_http(url)
        elapsed = asyncio.run(conversation())
        assert elapsed <= TTL_S + SLACK_S
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(15)
        if process.poll() is None:
            process.kill()
        log.close()
