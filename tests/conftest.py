"""Shared test fixtures: a real Kafka broker and a real PostgreSQL server for the session.

Where the infrastructure comes from, in order:

1. ``SAGACITY_BOOTSTRAP_SERVERS`` / ``SAGACITY_DATABASE_URL`` when set (``deploy/local/test``
   sets them from ``sagacity dev up``);
2. otherwise testcontainers, when a Docker engine answers;
3. otherwise the checkout's local stack (``sagacity.dev.Stack``), started for the session and
   stopped at its end (a stack that was already running is reused and left running).

Kafka and PostgreSQL are resolved independently and only when a test asks for them; the
session's header says which source each will come from and why. CI exercises the first (its
variables point at the local stack ``deploy/local/test`` brings up) and nothing else. Each test
gets fresh, uniquely named topics (``make_topic``) and its own schema (``pg_dsn``), so tests
never see each other's data and run in any order.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import shutil
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import pytest

from tests._loops import close_default_event_loop
from tests._topics import wait_for_topic

KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"
POSTGRES_IMAGE = "postgres:16"


def _docker_answers() -> bool:
    """Whether a Docker engine answers a ping within two seconds."""
    try:
        import docker
    except ImportError:
        return False
    # A failed ping leaves an unclosed socket behind; drop its warning, not the answer.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env(timeout=2)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False
        finally:
            gc.collect()


_VARIABLES = {"kafka": "SAGACITY_BOOTSTRAP_SERVERS", "postgres": "SAGACITY_DATABASE_URL"}
_IMAGES = {"kafka": KAFKA_IMAGE, "postgres": POSTGRES_IMAGE}


def _without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class _Infrastructure:
    """Lazily provides each service once per session and tears down what it started."""

    def __init__(self) -> None:
        self._exit = ExitStack()
        self._docker: bool | None = None
        self._bootstrap: str | None = None
        self._dsn: str | None = None

    def docker(self) -> bool:
        if self._docker is None:
            self._docker = _docker_answers()
        return self._docker

    def source(self, service: str) -> tuple[str, str]:
        """Where ``service`` (``kafka`` / ``postgres``) comes from this session, and why."""
        variable = _VARIABLES[service]
        value = os.environ.get(variable)
        if value:
            return _without_password(value), f"{variable} is set"
        if self.docker():
            return (
                f"testcontainers ({_IMAGES[service]})",
                f"{variable} is not set and a Docker engine answers",
            )
        return (
            "the checkout's local stack (sagacity dev, started for the session if not running)",
            f"{variable} is not set and no Docker engine answers",
        )

    def header(self) -> list[str]:
        """The session header's lines: each service's source and the reason for it."""
        lines = []
        for service in _VARIABLES:
            source, why = self.source(service)
            lines.append(f"infrastructure {service}: {source} ({why})")
        return lines

    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            self._bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS") or self._start_kafka()
        return self._bootstrap

    def database_url(self) -> str:
        if self._dsn is None:
            self._dsn = os.environ.get("SAGACITY_DATABASE_URL") or self._start_postgres()
        return self._dsn

    def _start_kafka(self) -> str:
        if self.docker():
            from testcontainers.community.kafka import KafkaContainer

            container = self._exit.enter_context(KafkaContainer(KAFKA_IMAGE).with_kraft())
            return str(container.get_bootstrap_server())
        from sagacity.dev import Stack

        stack = Stack()
        endpoints = stack.up(kafka=True, postgres=False)
        if "kafka" in endpoints.started:
            self._exit.callback(stack.down, kafka=True, postgres=False)
        assert endpoints.bootstrap_servers is not None
        return endpoints.bootstrap_servers

    def _start_postgres(self) -> str:
        if self.docker():
            from testcontainers.community.postgres import PostgresContainer

            container = self._exit.enter_context(
                PostgresContainer(POSTGRES_IMAGE, dbname="sagacity", driver=None)
            )
            return str(container.get_connection_url())
        from sagacity.dev import Stack

        stack = Stack()
        endpoints = stack.up(kafka=False, postgres=True)
        if "postgres" in endpoints.started:
            self._exit.callback(stack.down, kafka=False, postgres=True)
        assert endpoints.database_url is not None
        return endpoints.database_url

    def close(self) -> None:
        self._exit.close()


def _collect_leaks(nodeid: str) -> None:
    """Collect garbage now, so a resource a test leaked is reported against that test.

    Without this, a leaked event loop or socket is collected at some later, arbitrary point
    and ``filterwarnings=error`` fails whichever unrelated test is running then. The leak is
    written to stderr with the test that left it (visible with ``-rA`` or in CI's log).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
        # What survived is moved out of the collector's sight, so the next test's collection
        # looks only at what that test made: a full collection over the whole session's heap
        # after every test cost more than many of the tests.
        gc.freeze()
    for leak in caught:
        if issubclass(leak.category, ResourceWarning):
            sys.stderr.write(f"resource left by {nodeid}: {leak.message}\n")


@pytest.fixture(autouse=True)
def _close_lingering_event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close a default event loop a test (or a library it drove) left on the main thread.

    Some agent frameworks' synchronous entry points install a default loop and keep it; a later
    ``asyncio.run`` replaces it without closing it, and its collection is then reported as an
    unclosed-resource warning in whichever test happens to trigger garbage collection.
    """
    yield
    _collect_leaks(request.node.nodeid)
    close_default_event_loop()


@pytest.fixture(autouse=True, scope="module")
def _collect_everything_between_modules() -> Iterator[None]:
    """Give the collector the whole heap back once a module (and its fixtures) is done.

    Each test's collection freezes what survives it; what a module's fixtures held and let go
    in a cycle is found by the next test's collection after this.
    """
    yield
    gc.unfreeze()


_INFRASTRUCTURE = pytest.StashKey[_Infrastructure]()
_KEK_SETTING = "SAGACITY_KEY_ENCRYPTION_KEY_FILE"
_KEK_SOURCE = pytest.StashKey[str]()


def _session_key_encryption_key(config: pytest.Config) -> None:
    """The session runs sealed, as the demo and a deployment do (docs/operations/keys.md):
    the key-encryption key ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` names (``sagacity dev up``
    exports the stack's), else one made for the session; every test process inherits it. A
    test of clear data says so itself (``SAGACITY_ALLOW_CLEAR_DATA=1``, the variable unset)."""
    if os.environ.get(_KEK_SETTING):
        config.stash[_KEK_SOURCE] = f"{_KEK_SETTING} is set"
        return
    import tempfile
    from pathlib import Path

    from sagacity.privacy._envelope import write_key_encryption_key

    directory = Path(tempfile.mkdtemp(prefix="sagacity-test-kek-"))
    write_key_encryption_key(directory / "journal.kek")
    os.environ[_KEK_SETTING] = str(directory / "journal.kek")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    config.stash[_KEK_SOURCE] = f"a key made for the session ({_KEK_SETTING} was not set)"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_INFRASTRUCTURE] = _Infrastructure()
    _session_key_encryption_key(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which Kafka and PostgreSQL the session's tests use (when one asks), and why; which
    key-encryption key seals their journals."""
    return [
        *config.stash[_INFRASTRUCTURE].header(),
        f"journal sealed with: {config.stash[_KEK_SOURCE]}",
    ]


@pytest.fixture(scope="session")
def _infrastructure(request: pytest.FixtureRequest) -> Iterator[_Infrastructure]:
    infra = request.config.stash[_INFRASTRUCTURE]
    try:
        yield infra
    finally:
        infra.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(_infrastructure: _Infrastructure) -> str:
    """Bootstrap servers of a real Apache Kafka broker shared by the session."""
    return _infrastructure.bootstrap_servers()


@pytest.fixture
def make_topic(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Factory creating fresh, uniquely named topics; they are deleted after the test.

    ``make_topic(partitions=3, config=None) -> name``; ``config`` is a mapping of topic
    configuration (``{"retention.ms": "-1"}``).
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def create(partitions: int = 3, config: Mapping[str, str] | None = None) -> str:
        name = f"test.{uuid.uuid4().hex[:16]}"
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
        )
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)
        created.append(name)
        wait_for_topic(admin, name, partitions)
        return name

    yield create
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as exc:  # cleanup must not hide the test's own outcome
                logging.getLogger(__name__).warning("could not delete test topic: %s", exc)


@pytest.fixture(scope="session")
def postgres_dsn(_infrastructure: _Infrastructure) -> str:
    """Conninfo URL of a real PostgreSQL database (``sagacity``) shared by the session."""
    return _infrastructure.database_url()


def _schema_of_its_own(database_dsn: str) -> Iterator[str]:
    """A conninfo on ``database_dsn``'s database whose ``search_path`` is a fresh schema of its
    own, dropped after the test."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(database_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(database_dsn)
    options = params.get("options") or ""
    params["options"] = f"{options} -c search_path={schema}".strip()
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(database_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_dsn(postgres_dsn: str) -> Iterator[str]:
    """A conninfo whose ``search_path`` is a fresh schema of its own, dropped after the test."""
    yield from _schema_of_its_own(postgres_dsn)


@pytest.fixture(scope="session")
def users_postgres_dsn(postgres_dsn: str) -> Iterator[str]:
    """A database set up as users' often are, unlike ``postgres_dsn``'s (C-collated, UTC): its
    default collation ICU's en-US (``"alpha" < "Zeta"``, punctuation ignored at first) and its
    time zone ``Pacific/Chatham`` (12:45 or 13:45 ahead of UTC); made for the session (each
    test process its own), dropped after it."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"sagacity_users_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'"
                " LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"
            ).format(sql.Identifier(name))
        )
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET TimeZone = 'Pacific/Chatham'").format(
                sql.Identifier(name)
            )
        )
    params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def users_pg_dsn(users_postgres_dsn: str) -> Iterator[str]:
    """``pg_dsn`` on ``users_postgres_dsn``'s database: a fresh schema of its own."""
    yield from _schema_of_its_own(users_postgres_dsn)


@pytest.fixture(scope="session")
def approvals_key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An approvals decision key: on a shared journal (Kafka) a process that approves and
    resumes must sign its decisions (docs/adr/0014-signed-decisions-and-writers.md)."""
    from sagacity.signing._decision_signature import generate_key

    return generate_key(tmp_path_factory.mktemp("approvals-key") / "approvals.pem")
