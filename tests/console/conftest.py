"""A real world for the console's browser tests, shared by a module.

One Kafka topic and one PostgreSQL schema; the approvals service (with its console, its
consumer group and its sweep) served by uvicorn on a real port; the compensation service in
its own process; an agent on the Kafka journal in delegated mode; and headless Chromium
(Debian's ``chromium`` and ``chromium-driver``) driven by Selenium, one browser per principal.
Its parts (:func:`topic_and_schema`, :func:`console_settings`, :func:`serving`) also assemble
other modules' worlds, such as the sealed one of the redaction tests.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sagacity import Sagacity, SagaStatus, compose
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.producer import KafkaJournal
from tests._topics import wait_for_topic
from tests.approvals.conftest import entry_text
from tests.compensation import svc_tools
from tests.compensation.conftest import ServiceProcess, free_port
from tests.console.tools import ConsoleShop

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SAGACITY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SAGACITY_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
TOKENS = {
    "alice": "tok-alice-console-0123456789abcdef",
    "bob": "tok-bob-console-0123456789abcdef",
    "carol": "tok-carol-console-0123456789abcdef",
    "robot": "tok-robot-console-0123456789abcdef",
}
TOOLS = {"alice": ["*"], "bob": ["*"], "carol": ["charge"], "robot": ["*"]}
ROLES = {"robot": "agent"}
"""Principals that are not approvers: robot is an agent, whose token the console refuses."""
AGENTS = {"bob": ["robot@example.com"]}
"""bob's own agent: he decides none of robot's requests."""


def submit(driver: Any, button: Any, timeout: float = 20) -> None:
    """Click a form's button and wait until the page it leads to has replaced this one.

    The old page is marked with a script variable and the wait is for a document without it
    that has finished loading. Asking an element of the old page whether it is stale races
    the navigation: Chromium can answer that its node "does not belong to the document", an
    error that is not Selenium's stale-element one.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    marker = f"sagacityOld{uuid.uuid4().hex}"
    driver.execute_script(f"window.{marker} = true;")
    button.click()

    def replaced(d: Any) -> bool:
        try:
            return bool(
                d.execute_script(
                    f"return window.{marker} === undefined && document.readyState === 'complete';"
                )
            )
        except WebDriverException:
            return False  # mid-navigation: no document to ask yet

    WebDriverWait(driver, timeout).until(replaced)


def browsers_available() -> bool:
    """Whether Debian's chromium and chromedriver are installed."""
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


def new_browser() -> Any:
    """A headless Chromium session driven through Debian's chromedriver (no downloads)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-extensions",
        "--no-first-run",
        "--password-store=basic",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    return driver


def saga_id(prefix: str) -> str:
    """A fresh saga id starting with ``prefix``."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def approve_in(driver: Any) -> None:
    """Press Approve on the request page ``driver`` shows."""
    from selenium.webdriver.common.by import By

    submit(driver, driver.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]'))


def quietly(action: Callable[[], object]) -> None:
    """Run ``action`` (a teardown step), ignoring what it raises."""
    with contextlib.suppress(Exception):
        action()


def require_browsers() -> None:
    """Fail (never skip) when Chromium or its driver is missing; keep Selenium Manager from
    downloading anything."""
    if not browsers_available():
        pytest.fail(
            f"the console's browser tests need {CHROMIUM} and {CHROMEDRIVER} "
            "(Debian: apt-get install chromium chromium-driver)"
        )
    os.environ.setdefault("SE_OFFLINE", "true")


@contextlib.contextmanager
def topic_and_schema(
    kafka_bootstrap: str, postgres_dsn: str, name: str
) -> Iterator[tuple[str, str]]:
    """A fresh three-partition topic and a fresh schema, both dropped on exit.

    Yields:
        ``(topic, dsn)``, the dsn's ``search_path`` being the schema.
    """
    from confluent_kafka.admin import AdminClient, NewTopic
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    topic = f"test.{name}.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(
        timeout=30
    )
    wait_for_topic(admin, topic, 3)
    schema = f"{name}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
    params["options"] = f"{params.get('options') or ''} -c search_path={schema}".strip()
    try:
        yield topic, make_conninfo(**params)
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result(timeout=30)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def console_settings(
    tmp: Path, *, dsn: str, bootstrap: str, topic: str
) -> tuple[ApprovalsSettings, str]:
    """Settings of an approvals service with its console on a free port: the principals of
    :data:`TOKENS` in ``tmp/auth.toml``, decisions signed with a key written to
    ``tmp/approvals.pem``.

    Returns:
        The settings and the signing key's public key (hex), which resumers pin.
    """
    from sagacity.signing._decision_signature import generate_key

    auth = tmp / "auth.toml"
    auth.write_text(
        "\n".join(
            entry_text(
                f"{n}@example.com",
                TOKENS[n],
                TOOLS[n],
                role=ROLES.get(n, "approver"),
                agents=AGENTS.get(n),
            )
            for n in TOKENS
        ),
        encoding="utf-8",
    )
    approvals_key = generate_key(tmp / "approvals.pem")
    settings = ApprovalsSettings(
        database_url=dsn,
        bootstrap_servers=bootstrap,
        topic=topic,
        group_id=f"approvals-{uuid.uuid4().hex[:8]}",
        auth_file=str(auth),
        port=free_port(),
        sweep_interval_s=0.5,
        signing_key=str(tmp / "approvals.pem"),
    )
    return settings, approvals_key.public_hex


@contextlib.contextmanager
def serving(server: ApprovalsServer) -> Iterator[str]:
    """Serve ``server`` with uvicorn on its settings' port, in a thread, until exit.

    Yields:
        The service's base URL.
    """
    import uvicorn

    port = server.settings.port
    config = uvicorn.Config(server.app, host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not web.started:
            assert time.monotonic() < deadline, "the approvals service did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        thread.join(15)


@dataclass
class World:
    """Everything a console test drives."""

    url: str
    dsn: str
    topic: str
    bootstrap: str
    server: ApprovalsServer
    agent: Sagacity
    compensator: ServiceProcess | None
    tmp: Path
    browsers: dict[str, Any] = field(default_factory=dict)

    def browser(self, who: str) -> Any:
        """``who``'s browser (one per principal, so each has its own cookies)."""
        if who not in self.browsers:
            self.browsers[who] = new_browser()
        return self.browsers[who]

    def close_browsers(self) -> None:
        """Quit every browser opened."""
        for driver in self.browsers.values():
            with contextlib.suppress(Exception):
                driver.quit()

    def tool(self, name: str) -> Any:
        tool = self.agent.registry.get(name)
        assert tool is not None
        return tool.wrapped

    def gate(self, saga: str, *calls: tuple[str, dict[str, Any]]) -> int:
        """Run a saga whose last call is gated; returns the request's seq."""

        def work() -> None:
            for name, kwargs in calls:
                self.tool(name)(**kwargs)

        result = self.agent.saga(saga, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL, result
        assert result.awaiting_seq is not None
        return result.awaiting_seq

    def effects(self) -> list[tuple[str, int, str]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT saga_id, seq, tool FROM undo_effects ORDER BY id"
            ).fetchall()
        return [(str(a), int(b), str(c)) for a, b, c in rows]

    def sign_in(self, who: str, token: str | None = None) -> Any:
        from selenium.webdriver.common.by import By

        driver = self.browser(who)
        driver.get(f"{self.url}/ui/login")
        driver.find_element(By.NAME, "token").send_keys(token or TOKENS[who])
        submit(driver, driver.find_element(By.CSS_SELECTOR, "form.login button"))
        return driver

    def open_request(self, who: str, saga: str, seq: int) -> Any:
        """``who``'s browser on the page of the request at ``seq`` of ``saga``."""
        driver = self.browser(who)
        driver.get(f"{self.url}/ui/requests/{saga}/{seq}")
        return driver

    def wait_for(self, check: Callable[[], Any], timeout: float = 15, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or check}")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def world(
    kafka_bootstrap: str, postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    require_browsers()
    tmp = tmp_path_factory.mktemp("console")
    with contextlib.ExitStack() as stack:
        topic, dsn = stack.enter_context(topic_and_schema(kafka_bootstrap, postgres_dsn, "console"))
        svc_tools.create_schema(dsn)
        settings, approvals_public = console_settings(
            tmp, dsn=dsn, bootstrap=kafka_bootstrap, topic=topic
        )
        server = ApprovalsServer(
            settings, dependencies=compose.approvals_of(settings), tools=[ConsoleShop(dsn)]
        )
        url = stack.enter_context(serving(server))
        log = tmp / "compensation.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=kafka_bootstrap,
            SAGACITY_DATABASE_URL=dsn,
            SAGACITY_TOPIC=topic,
            SAGACITY_COMPENSATION_GROUP=f"compensation-{uuid.uuid4().hex[:8]}",
            SVC_TOOLS_DSN=dsn,
            PYTHONPATH=str(ROOT),
            SAGACITY_APPROVALS_PUBLIC_KEY=approvals_public,
            SAGACITY_ALLOW_CLEAR_DATA="1",  # the console's tests run in clear, said so
        )
        cport = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sagacity.cli",
                    "serve",
                    "compensation",
                    "--tools",
                    "tests.console.tools:shop",
                    "--http-port",
                    str(cport),
                    "--handoff-grace",
                    "2",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        compensator = ServiceProcess(proc=proc, port=cport, log=log)
        stack.callback(compensator.kill)
        journal = KafkaJournal(kafka_bootstrap, topic=topic)
        stack.callback(quietly, journal.close)
        agent = Sagacity(
            journal,
            compensation="delegated",
            writer_id="agent-7",
            approvals_public_key=approvals_public,
        )
        agent.wrap(ConsoleShop(dsn))
        world = World(
            url=url,
            dsn=dsn,
            topic=topic,
            bootstrap=kafka_bootstrap,
            server=server,
            agent=agent,
            compensator=compensator,
            tmp=tmp,
        )
        stack.callback(world.close_browsers)
        compensator.wait_ready()
        yield world
