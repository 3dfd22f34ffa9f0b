"""The operator console in a real headless browser, on the real broker and database.

Each test drives Chromium against the approvals service with its console, while an agent and
the compensation service work on the same Kafka topic and PostgreSQL schema.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By

from sagacity import EventType, SagaStatus, verify
from sagacity.postgres import PostgresConsoleSessions
from tests.console.conftest import World, approve_in, saga_id, submit

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def row_for(driver: Any, saga: str, seq: int) -> Any:
    found = driver.find_elements(By.CSS_SELECTOR, f'tr[data-saga-id="{saga}"][data-seq="{seq}"]')
    return found[0] if found else None


def test_sign_in_see_the_exact_payload_approve_and_the_saga_completes(world: World) -> None:
    driver = world.sign_in("alice")
    assert driver.current_url == f"{world.url}/ui/", driver.page_source
    saga = saga_id("wire")
    seq = world.gate(
        saga,
        ("reserve", {"order": saga, "item": "lamp"}),
        ("wire", {"order": saga, "amount": 100}),
    )

    # The open inbox shows the new request by itself (it reloads every few seconds).
    def inbox_row() -> tuple[str, str] | None:
        try:
            row = row_for(driver, saga, seq)
            return row and (row.text, row.find_element(By.LINK_TEXT, "wire").get_attribute("href"))
        except StaleElementReferenceException:  # the page reloaded under us
            return None

    text, link = world.wait_for(inbox_row, timeout=12, what="inbox row")
    assert "wire" in text
    assert "IRREVERSIBLE" in text
    assert "0 of 1" in text
    assert "agent-7" in text
    driver.get(link)
    payload = driver.find_element(By.CSS_SELECTOR, ".payload").text
    stored = next(e for e in world.agent.entries(saga) if e.seq == seq).payload
    assert payload == stored
    assert json.loads(driver.find_element(By.CSS_SELECTOR, ".formatted").text) == json.loads(stored)
    assert "matches the request's recorded hash" in driver.page_source
    assert "reserve" in driver.find_element(By.CSS_SELECTOR, "table.chain").text
    approve_in(driver)
    assert "Your approval is recorded" in driver.page_source
    decided = driver.find_element(By.CSS_SELECTOR, ".decided").text
    assert "approved by alice@example.com" in decided
    # The agent resumes with the payload it proposed, and the saga completes.
    result = world.agent.resume_saga(saga, seq, stored)
    assert result.status is SagaStatus.COMPLETED
    approved = [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    assert [e.actor for e in approved] == ["alice@example.com"]
    driver.get(f"{world.url}/ui/sagas/{saga}")
    assert "COMPLETED" in driver.find_element(By.TAG_NAME, "h1").text
    assert "verified" in driver.find_element(By.CSS_SELECTOR, ".verdict").text


def test_privileged_needs_a_second_principal_in_a_second_browser(world: World) -> None:
    saga = saga_id("grant")
    seq = world.gate(saga, ("grant", {"order": saga, "role": "operator"}))
    world.server.service.materialise(saga)
    alice = world.sign_in("alice")
    world.open_request("alice", saga, seq)
    assert "0 of 2" in alice.find_element(By.CSS_SELECTOR, ".state").text
    approve_in(alice)
    state = alice.find_element(By.CSS_SELECTOR, ".state").text
    assert "1 of 2 (alice@example.com)" in state
    assert "needs another person's signature" in state
    # The same person signing twice is refused with the core's message.
    approve_in(alice)
    assert (
        "alice@example.com already signed this request"
        in alice.find_element(By.CSS_SELECTOR, ".refusal").text
    )
    stored = next(e for e in world.agent.entries(saga) if e.seq == seq).payload
    assert stored is not None
    bob = world.sign_in("bob")
    world.open_request("bob", saga, seq)
    approve_in(bob)
    assert "approved by bob@example.com" in bob.find_element(By.CSS_SELECTOR, ".decided").text
    result = world.agent.resume_saga(saga, seq, stored)
    assert result.status is SagaStatus.COMPLETED
    signers = [e.actor for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    assert signers == ["alice@example.com", "bob@example.com"]


def test_reject_hands_the_saga_to_compensation(world: World) -> None:
    saga = saga_id("reject")
    seq = world.gate(
        saga,
        ("reserve", {"order": saga, "item": "desk"}),
        ("wire", {"order": saga, "amount": 5000}),
    )
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    world.open_request("alice", saga, seq)
    driver.find_element(By.ID, "reason").send_keys("not this vendor")
    submit(driver, driver.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="reject"]'))
    assert "Your rejection is recorded" in driver.page_source
    final = world.agent.wait_for_outcome(saga, timeout=30)
    assert final.status is SagaStatus.REJECTED
    assert [t for s, _q, t in world.effects() if s == saga] == ["reserve"]
    rejected = [e for e in world.agent.entries(saga) if e.event_type is E.REJECTED]
    assert [(e.actor, e.error) for e in rejected] == [("alice@example.com", "not this vendor")]
    # Someone opening it afterwards sees who decided and when; the buttons are gone.
    bob = world.sign_in("bob")
    world.open_request("bob", saga, seq)
    decided = bob.find_element(By.CSS_SELECTOR, ".decided").text
    assert "rejected by alice@example.com at 20" in decided
    assert not bob.find_elements(By.CSS_SELECTOR, 'button[name="decision"]')


def test_a_suspect_step_settled_executed_is_undone_once(world: World) -> None:
    from tests.compensation.test_settlement_e2e import suspect_saga

    saga = saga_id("suspect")
    seq = suspect_saga(world.agent, saga)
    driver = world.sign_in("alice")

    def settle_form() -> Any:
        driver.get(f"{world.url}/ui/attention")
        found = driver.find_elements(
            By.CSS_SELECTOR, f'form.settle[data-saga-id="{saga}"][data-seq="{seq}"]'
        )
        return found[0] if found else None

    form = world.wait_for(settle_form, timeout=15, what="the saga in the attention queue")
    article = driver.find_element(By.CSS_SELECTOR, f'article[data-saga-id="{saga}"]')
    assert "SUSPECT" in article.text
    assert "charge" in article.text
    from selenium.webdriver.support.select import Select

    Select(form.find_element(By.NAME, "outcome")).select_by_value("executed")
    form.find_element(By.NAME, "note").send_keys("the bank shows the charge")
    submit(driver, form.find_element(By.TAG_NAME, "button"))
    assert "The settlement is recorded" in driver.page_source
    final = world.agent.wait_for_outcome(saga, timeout=30)
    assert final.status is SagaStatus.COMPENSATED
    assert [(q, t) for s, q, t in world.effects() if s == saga and t == "charge"] == [
        (seq, "charge")
    ]
    settled = [e for e in world.agent.entries(saga) if e.event_type is E.SUSPECT_SETTLED]
    assert [(e.actor, e.attributes["outcome"]) for e in settled] == [
        ("alice@example.com", "executed")
    ]
    assert verify(list(world.agent.entries(saga)), saga_id=saga).ok
    # It leaves the queue once the compensation service has ended it COMPENSATED.
    world.wait_for(lambda: settle_form() is None, timeout=15, what="the saga to leave")
    driver.get(f"{world.url}/ui/sagas/{saga}")
    timeline = driver.find_element(By.CSS_SELECTOR, "table.timeline").text
    assert "SUSPECT_SETTLED" in timeline
    assert "the bank shows the charge" in timeline


HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>']


def test_hostile_payloads_render_as_text_and_stay_inert(world: World) -> None:
    saga = saga_id("hostile")
    seq = world.gate(saga, ("wire", {"order": HOSTILE[0] + HOSTILE[1], "amount": 1}))
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    for page in (f"/ui/requests/{saga}/{seq}", f"/ui/sagas/{saga}", "/ui/"):
        driver.get(world.url + page)
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - reading it is the check
        assert not driver.find_elements(By.CSS_SELECTOR, "main script, main img")
        loaded = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert all(name.startswith(world.url + "/ui/static/") for name in loaded), loaded
    driver.get(f"{world.url}/ui/requests/{saga}/{seq}")
    text = driver.find_element(By.CSS_SELECTOR, ".payload").text
    assert HOSTILE[0] in text
    assert "<img src=x onerror=alert(2)>" in text  # its quote is JSON-escaped in the payload
    stored = next(e for e in world.agent.entries(saga) if e.seq == seq).payload
    assert text == stored


def test_a_cross_site_post_is_refused(world: World, tmp_path: Any) -> None:
    import http.server
    import threading

    from tests.compensation.conftest import free_port

    saga = saga_id("csrf")
    seq = world.gate(saga, ("wire", {"order": saga, "amount": 7}))
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    page = tmp_path / "attack.html"
    page.write_text(
        f'<form method="post" action="{world.url}/ui/requests/{saga}/{seq}">'
        '<input type="hidden" name="decision" value="approve">'
        '<input type="hidden" name="csrf" value="guessed">'
        '<button id="go" type="submit">win a prize</button></form>',
        encoding="utf-8",
    )
    port = free_port()
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(tmp_path)
    )
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=attacker.serve_forever, daemon=True)
    thread.start()
    try:
        driver.get(f"http://localhost:{port}/attack.html")
        submit(driver, driver.find_element(By.ID, "go"))
        assert "cross-site request refused" in driver.page_source
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert not [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    # A same-origin post with the victim's session cookie but without its form token (what a
    # script that stole the cookie could send) is refused as well.
    import httpx

    cookie = driver.get_cookie("sagacity_session")
    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    refused = httpx.post(
        f"{world.url}/ui/requests/{saga}/{seq}",
        data={"decision": "approve", "csrf": "guessed"},
        cookies={"sagacity_session": cookie["value"]},
        headers={"Origin": world.url},
    )
    assert refused.status_code == 403
    assert "missing or stale form token" in refused.text
    assert not [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]


def test_an_expired_session_goes_back_to_sign_in_and_returns_with_nothing_lost(
    world: World,
) -> None:
    import psycopg

    saga = saga_id("expiry")
    seq = world.gate(saga, ("wire", {"order": saga, "amount": 3}))
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        conn.execute("UPDATE sagacity_console_session SET expires_at_us = 0")
    world.open_request("alice", saga, seq)
    assert driver.current_url.startswith(f"{world.url}/ui/login?next=")
    driver.find_element(By.NAME, "token").send_keys("tok-alice-console-0123456789abcdef")
    submit(driver, driver.find_element(By.CSS_SELECTOR, "form.login button"))
    assert driver.current_url == f"{world.url}/ui/requests/{saga}/{seq}"
    assert driver.find_elements(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]')
    assert not [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]


def test_unknown_pages_a_foreign_tool_and_signing_out(world: World) -> None:
    driver = world.sign_in("alice")
    for page in ("/ui/sagas/no-such-saga", "/ui/requests/no-such-saga/3", "/ui/nothing"):
        driver.get(world.url + page)
        assert driver.find_element(By.TAG_NAME, "h1").text == "Not found", page
    saga = saga_id("foreign")
    seq = world.gate(saga, ("wire", {"order": saga, "amount": 9}))
    world.server.service.materialise(saga)
    carol = world.sign_in("carol")  # carol decides for charge only
    world.open_request("carol", saga, seq)
    assert carol.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    assert "may not read requests for tool 'wire'" in carol.page_source
    submit(carol, carol.find_element(By.CSS_SELECTOR, "form.signout button"))
    assert carol.current_url == f"{world.url}/ui/login"
    carol.get(f"{world.url}/ui/")
    assert carol.current_url.startswith(f"{world.url}/ui/login")


def test_the_database_down_shows_an_error_page_and_decides_nothing(world: World) -> None:
    import httpx

    from tests.compensation.conftest import free_port

    saga = saga_id("dbdown")
    seq = world.gate(saga, ("wire", {"order": saga, "amount": 4}))
    world.server.service.materialise(saga)
    driver = world.sign_in("alice")
    world.open_request("alice", saga, seq)
    cookie = driver.get_cookie("sagacity_session")
    assert cookie is not None
    # The database is down for every table the service keeps there (requests and sessions).
    store = world.server.store
    sessions = world.server.sessions._table
    assert isinstance(sessions, PostgresConsoleSessions)
    real = store._dsn
    store._dsn = sessions._dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    try:
        driver.get(f"{world.url}/ui/")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Unavailable"
        assert "cannot connect to PostgreSQL" in driver.page_source
        approve_in_page = httpx.post(
            f"{world.url}/ui/requests/{saga}/{seq}",
            data={"decision": "approve", "csrf": "whatever"},
            cookies={"sagacity_session": cookie["value"]},
            headers={"Origin": world.url},
        )
        assert approve_in_page.status_code == 503
    finally:
        store._dsn = sessions._dsn = real
    assert not [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    driver.get(f"{world.url}/ui/requests/{saga}/{seq}")
    assert "0 of 1" in driver.find_element(By.CSS_SELECTOR, ".state").text


def test_sign_in_is_rate_limited_and_no_token_reaches_a_page_url_or_log(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import re

    import httpx

    from tests.console.conftest import TOKENS

    caplog.set_level(logging.DEBUG)
    driver = world.sign_in("alice")
    for page in ("/ui/", "/ui/attention", "/ui/metrics"):
        driver.get(world.url + page)
        assert all(token not in driver.page_source for token in TOKENS.values())
        assert all(token not in driver.current_url for token in TOKENS.values())
    try:
        with httpx.Client(base_url=world.url) as client:
            form = client.get("/ui/login").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)
            assert csrf is not None
            statuses = []
            for attempt in range(7):
                answer = client.post(
                    "/ui/login",
                    data={"token": f"wrong-{attempt}", "csrf": csrf.group(1), "next": "/ui/"},
                    headers={"Origin": world.url},
                )
                statuses.append(answer.status_code)
            assert statuses == [401] * 5 + [429] * 2
            assert "too many failed sign-ins" in answer.text
            # Even the right token waits out the limit.
            blocked = client.post(
                "/ui/login",
                data={"token": TOKENS["alice"], "csrf": csrf.group(1), "next": "/ui/"},
                headers={"Origin": world.url},
            )
            assert blocked.status_code == 429
    finally:
        world.server.login_limiter.succeeded("127.0.0.1")
    # The service's own log lines (the test's browser driver logs what it types, itself).
    logged = "\n".join(
        r.getMessage() for r in caplog.records if r.name.startswith(("sagacity", "uvicorn"))
    )
    assert "signed in" in logged
    assert "failed sign-in" in logged
    assert all(token not in logged for token in TOKENS.values())
    assert "wrong-0" not in logged


@pytest.mark.slow
def test_the_demos_approval_given_in_the_console(
    kafka_bootstrap: str, pg_dsn: str, tmp_path: Any
) -> None:
    import re
    import subprocess
    import sys
    import threading

    from tests.console.conftest import ROOT, new_browser

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SAGACITY_")}
    env.update(SAGACITY_BOOTSTRAP_SERVERS=kafka_bootstrap, SAGACITY_DATABASE_URL=pg_dsn)
    topic = f"test.demo.{uuid.uuid4().hex[:12]}"
    argv = [sys.executable, "-m", "sagacity.cli", "demo", "--run-dir", str(tmp_path)]
    argv += ["--topic", topic, "--run-id", "c1", "--approve-in-console", "--timeout", "90"]
    lines: list[str] = []
    with subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as demo:
        assert demo.stdout is not None
        stdout = demo.stdout

        def read_until(pattern: str) -> re.Match[str]:
            while True:
                line = stdout.readline()
                assert line, "".join(lines)
                lines.append(line)
                found = re.search(pattern, line)
                if found:
                    return found

        console = read_until(r"^\[console\]  (\S+)/ui/ \(sign in as \S+ with token (\S+)\)")
        url, token = console.group(1), console.group(2)
        waiting = read_until(r"waiting for .* in the console: (\S+)")
        page = waiting.group(1)
        driver = new_browser()
        try:
            driver.get(f"{url}/ui/login")
            driver.find_element(By.NAME, "token").send_keys(token)
            submit(driver, driver.find_element(By.CSS_SELECTOR, "form.login button"))
            driver.get(page)
            shown = driver.find_elements(By.CSS_SELECTOR, ".payload")
            assert shown, driver.page_source
            payload = shown[0].text
            assert "customer@example.com" in payload
            approve_in(driver)
            assert "Your approval is recorded" in driver.page_source
        finally:
            driver.quit()
        rest = threading.Thread(target=lambda: lines.extend(stdout.readlines()), daemon=True)
        rest.start()
        assert demo.wait(timeout=240) == 0, "".join(lines)
        rest.join(10)
    out = "".join(lines)
    assert "ok  manager@example.com to approve order-confirmed-c1/" in out
    assert "order-confirmed-c1: COMPLETED" in out
    assert re.search(r"^demo complete: all \d+ expectations met", out, re.M)


def test_a_decoy_request_is_not_what_the_console_shows_or_signs(world: World) -> None:
    """A producer to the topic puts a harmless-looking request, valid hash but linking nowhere,
    at the seq the agent's hostile request is about to take: the console shows the chain's
    request, and the approval given there binds it (docs/adr/0025-trust-model.md)."""
    from confluent_kafka import Producer

    from sagacity import EntryDraft
    from sagacity.chain import link, payload_sha256
    from sagacity.entries import _attributes as attr
    from sagacity.schemas import encode_entry

    saga = saga_id("decoy")
    harmless = json.dumps({"order": saga, "amount": 1}, separators=(",", ":"))
    decoys: list[Any] = []

    def decoy_then(name: str) -> Any:
        def call(**kwargs: Any) -> Any:
            world.agent.journal.flush()
            head = world.agent.entries(saga)[-1]
            decoy = link(
                EntryDraft(
                    saga_id=saga,
                    event_type=E.AWAITING_APPROVAL,
                    tool=name,
                    payload=harmless,
                    attributes={
                        attr.PAYLOAD_SHA256: payload_sha256(harmless),
                        attr.SIGNATURES_REQUIRED: "1",
                        attr.POLICY_VERSION: "1",
                        attr.REVERSIBILITY: "IRREVERSIBLE",
                    },
                ),
                seq=head.seq + 1,
                prev_hash="ab" * 32,
            )
            producer = Producer(
                {"bootstrap.servers": world.bootstrap, "partitioner": "murmur2_random"}
            )
            producer.produce(world.topic, key=saga.encode(), value=encode_entry(decoy))
            assert producer.flush(10) == 0
            decoys.append(decoy)
            return world.tool(name)(**kwargs)

        return call

    def work() -> None:
        world.tool("reserve")(order=saga, item="lamp")
        decoy_then("wire")(order=saga, amount=999999)

    result = world.agent.saga(saga, work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    seq = result.awaiting_seq
    assert seq == decoys[0].seq
    request = next(e for e in world.agent.entries(saga) if e.seq == seq)
    driver = world.sign_in("alice")
    world.wait_for(lambda: world.server.store.get(saga, seq) is not None, what="the request folded")
    driver.get(f"{world.url}/ui/requests/{saga}/{seq}")
    payload = driver.find_element(By.CSS_SELECTOR, ".payload").text
    assert payload == request.payload
    assert "999999" in payload
    assert harmless not in driver.page_source
    shown = driver.find_element(By.CSS_SELECTOR, ".request-hash").text
    assert shown == request.hash != decoys[0].hash
    approve_in(driver)
    assert "Your approval is recorded" in driver.page_source
    [approval] = [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    assert approval.attributes[attr.REQUEST_HASH] == request.hash
    assert world.server.store.quarantined(saga_id=saga)[0].entry_hash == decoys[0].hash
