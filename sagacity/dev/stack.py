"""The checkout's development stack: Kafka (one broker, or a cluster) and one PostgreSQL server.

State lives under :func:`~sagacity.dev._paths.dev_home` (``<project root>/.sagacity/dev``
unless ``SAGACITY_DEV_HOME`` says otherwise): ``kafka/`` and ``postgres/`` each hold their
process's ``state.json`` (pid, ports), so ``up`` from any shell in the checkout finds and
reuses what is running, and ``down`` stops only what this directory started. A cluster
(``up(brokers=3)``) lives in ``kafka-cluster/`` instead of ``kafka/``; once one is recorded
there, the stack's Kafka is that cluster until it is purged.
"""

from __future__ import annotations

import contextlib
import fcntl
import shlex
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.dev import _secure
from sagacity.dev._paths import dev_home
from sagacity.dev.cluster import KafkaCluster
from sagacity.dev.kafka import KafkaBroker
from sagacity.dev.postgres import PostgresServer
from sagacity.errors import DevStackError, TopicConfigError, TopicNotFoundError
from sagacity.privacy._envelope import KEK_SETTING, write_key_encryption_key

BOOTSTRAP_VAR = "SAGACITY_BOOTSTRAP_SERVERS"
DATABASE_VAR = "SAGACITY_DATABASE_URL"
KEK_FILE = "journal.kek"
"""The stack's key-encryption key, in its state directory (made once by ``up``)."""


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where the stack's services answer, and which of them this call started."""

    bootstrap_servers: str | None = None
    database_url: str | None = None
    started: frozenset[str] = field(default_factory=frozenset)
    principals: Mapping[str, Path] = field(default_factory=dict)
    """A secured stack's principals and the file of each one's client settings."""
    key_encryption_key: Path | None = None
    """The stack's key-encryption key file: the journal's data is sealed under it."""

    def export_lines(self) -> list[str]:
        """``export VAR=value`` lines a POSIX shell can ``eval`` (a secured stack's
        principals follow as comments: source one's file to act as it)."""
        lines = []
        if self.bootstrap_servers is not None:
            lines.append(f"export {BOOTSTRAP_VAR}={shlex.quote(self.bootstrap_servers)}")
        if self.database_url is not None:
            lines.append(f"export {DATABASE_VAR}={shlex.quote(self.database_url)}")
        if self.key_encryption_key is not None:
            lines.append(f"export {KEK_SETTING}={shlex.quote(str(self.key_encryption_key))}")
        for name, path in self.principals.items():
            lines.append(f"# principal {name}: . {shlex.quote(str(path))}")
        return lines


@dataclass(frozen=True, kw_only=True)
class ServiceStatus:
    """One service's recorded state as seen now."""

    name: str
    running: bool
    pid: int | None
    address: str | None
    detail: str | None = None
    """A state beyond running/stopped (``paused``, ``starting``), when there is one."""


class Stack:
    """The Kafka broker and PostgreSQL server of one state directory.

    Args:
        home: state directory; default ``SAGACITY_DEV_HOME`` or ``<project>/.sagacity/dev``.
    """

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home).resolve() if home is not None else dev_home()
        self.postgres = PostgresServer(self.home / "postgres")
        self.cluster_home = self.home / "kafka-cluster"
        self.kafka = KafkaBroker(self.home / "kafka", security=self.security())

    @property
    def secured(self) -> bool:
        """Whether this stack's Kafka is secured (``up(secure=True)`` made its material)."""
        return (self.home / "secure" / "passwords.json").is_file()

    def security(self, *, create: bool = False) -> _secure.Security | None:
        """The secured stack's material (``create``: make it if missing); ``None`` when the
        stack is not secured."""
        if not create and not self.secured:
            return None
        return _secure.load_or_create(self.home / "secure")

    @property
    def kek_file(self) -> Path:
        """The stack's key-encryption key file (``up`` makes it when missing)."""
        return self.home / KEK_FILE

    def _key_encryption_key(self) -> Path:
        """The stack's key-encryption key, made once: the demo, the tests and whatever runs
        with the stack's variables journal sealed (docs/operations/keys.md), so a saga can
        be erased; a purge deletes it with the data keys it wraps."""
        if not self.kek_file.is_file():
            write_key_encryption_key(self.kek_file)
        return self.kek_file

    @property
    def brokers(self) -> int:
        """How many Kafka brokers this stack runs: the recorded cluster's size, else 1."""
        return KafkaCluster.recorded_size(self.cluster_home) or 1

    def cluster(self, brokers: int | None = None) -> KafkaCluster:
        """The stack's Kafka cluster (``brokers`` nodes; default the recorded size).

        Raises:
            DevStackError: a different cluster size is recorded, or none is and none is asked.
        """
        size = brokers or KafkaCluster.recorded_size(self.cluster_home)
        if size is None:
            raise DevStackError(
                f"no Kafka cluster in {self.home}: start one with `sagacity dev up --brokers 3`"
            )
        return KafkaCluster(self.cluster_home, brokers=size, security=self.security())

    def _start_kafka(self, brokers: int) -> str:
        if brokers == 1 and self.brokers == 1:
            return self.kafka.start()
        if brokers == 1:
            raise DevStackError(
                f"this stack runs a cluster of {self.brokers} brokers: pass --brokers "
                f"{self.brokers}, or `sagacity dev down --purge` to go back to one broker"
            )
        if self.kafka.is_running():
            raise DevStackError(
                "this stack runs a single broker: `sagacity dev down --kafka --no-postgres` "
                f"first to start a cluster of {brokers}"
            )
        return self.cluster(brokers).start()

    def _kafka_running(self) -> bool:
        if self.brokers > 1:
            return self.cluster().is_running()
        return self.kafka.is_running()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Two `up`s in one checkout (a shell and a test session) must not start two brokers.
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _secure_or_refuse(self, kafka: bool, secure: bool) -> None:
        """Make a new stack's security material when asked; refuse mixing the two modes."""
        if not kafka or secure == self.secured:
            return
        if not secure:
            raise DevStackError(
                f"the stack in {self.home} is secured: pass --secure (or `sagacity dev down "
                "--purge` to go back to a plaintext broker)"
            )
        has_data = any(
            (home / "meta.properties").is_file() or (home / "cluster.json").is_file()
            for home in (self.kafka.data_dir, self.cluster_home)
        ) or any(self.cluster_home.glob("node-*/data/meta.properties"))
        if has_data:
            raise DevStackError(
                f"the stack in {self.home} has a plaintext broker with data: "
                "`sagacity dev down --purge` first to start a secured one"
            )
        self.security(create=True)
        self.kafka = KafkaBroker(self.home / "kafka", security=self.security())

    def up(
        self,
        *,
        kafka: bool = True,
        postgres: bool = True,
        brokers: int = 1,
        secure: bool = False,
        topic: str = DEFAULT_TOPIC,
    ) -> Endpoints:
        """Start (or reuse) the requested services and return where they answer, with the
        stack's key-encryption key (made in the state directory the first time).

        Kafka and PostgreSQL start in parallel. If one fails, one this call started is
        stopped again before the error propagates.

        Args:
            kafka: start Kafka.
            postgres: start PostgreSQL.
            brokers: 1 for a single broker, more for a local cluster of that many nodes
                (recorded: later calls must ask for the same size until a purge).
            secure: Kafka over SASL_SSL with one SCRAM principal per role and the
                checklist's ACLs on ``topic`` (:mod:`sagacity.dev._secure`); the journal
                topic and its dead-letter topic are made by the super user. Recorded: a
                secured stack stays secured until a purge.
            topic: the journal topic the ACLs of a secured stack name.

        Raises:
            MissingToolError: Java, Maven or PostgreSQL is not installed.
            ProcessStartError: a server did not start; the message ends with its log.
            DevStackError: ``brokers`` or ``secure`` differs from what this stack runs.
        """
        with self._locked():
            self._secure_or_refuse(kafka, secure)
            kafka_was = kafka and self._kafka_running()
            pg_was = postgres and self.postgres.is_running()
            with ThreadPoolExecutor(max_workers=2) as pool:
                kafka_job = pool.submit(self._start_kafka, brokers) if kafka else None
                pg_job = pool.submit(self.postgres.start) if postgres else None
                errors: list[BaseException] = []
                bootstrap = dsn = None
                if kafka_job is not None:
                    try:
                        bootstrap = kafka_job.result()
                    except BaseException as exc:
                        errors.append(exc)
                if pg_job is not None:
                    try:
                        dsn = pg_job.result()
                    except BaseException as exc:
                        errors.append(exc)
            if errors:
                if bootstrap is not None and not kafka_was:
                    self._stop_kafka()
                if dsn is not None and not pg_was:
                    self.postgres.stop()
                raise errors[0]
            security = self.security()
            principals: dict[str, Path] = {}
            if security is not None and bootstrap is not None:
                _secure_topics(security, bootstrap, topic)
                principals = {
                    name: security.credentials_file(name)
                    for name in (_secure.ADMIN, *_secure.PRINCIPALS)
                }
            started = {
                name
                for name, wanted, was in (
                    ("kafka", kafka, kafka_was),
                    ("postgres", postgres, pg_was),
                )
                if wanted and not was
            }
            return Endpoints(
                bootstrap_servers=bootstrap,
                database_url=dsn,
                started=frozenset(started),
                principals=principals,
                key_encryption_key=self._key_encryption_key(),
            )

    def down(self, *, kafka: bool = True, postgres: bool = True) -> list[str]:
        """Stop the requested services this state directory started; return the names stopped."""
        stopped = []
        with self._locked():
            if kafka and self._stop_kafka():
                stopped.append("kafka")
            if postgres and self.postgres.stop():
                stopped.append("postgres")
        return stopped

    def _stop_kafka(self) -> bool:
        stopped = self.kafka.stop()
        if self.brokers > 1:
            stopped = self.cluster().stop() or stopped
        return stopped

    def purge(self) -> None:
        """Stop both services and delete all their data and state."""
        with self._locked():
            self.kafka.purge()
            if self.brokers > 1:
                self.cluster().purge()
            self.postgres.purge()
        shutil.rmtree(self.home, ignore_errors=True)

    def status(self) -> list[ServiceStatus]:
        """The recorded state of each service (each node of a cluster) and whether it answers."""
        pg_state = self.postgres.state()
        if self.brokers > 1:
            kafka = [
                ServiceStatus(
                    name=f"kafka-{node.node_id}",
                    running=node.state == "running",
                    pid=node.pid,
                    address=node.address,
                    detail=node.state,
                )
                for node in self.cluster().status()
            ]
        else:
            kafka_state = self.kafka.state()
            kafka = [
                ServiceStatus(
                    name="kafka",
                    running=self.kafka.is_running(),
                    pid=kafka_state.pid if kafka_state else None,
                    address=f"127.0.0.1:{kafka_state.port}" if kafka_state else None,
                )
            ]
        return [
            *kafka,
            ServiceStatus(
                name="postgres",
                running=self.postgres.is_running(),
                pid=pg_state.pid if pg_state else None,
                address=self.postgres.dsn() if pg_state else None,
            ),
        ]


def _secure_topics(security: _secure.Security, bootstrap: str, topic: str) -> None:
    """As the super user: the checklist's ACLs on ``topic``, the topic and its dead-letter
    topic (each made only when missing; no principal of a role may create topics)."""
    from confluent_kafka.admin import AdminClient

    from sagacity.dev._acls import apply_acls
    from sagacity.producer import TopicSpec, create_topic, describe_topic, ensure_topic, with_logger

    config = {**security.client_settings(_secure.ADMIN), "bootstrap.servers": bootstrap}
    apply_acls(config, topic)
    admin = AdminClient(with_logger(config))
    try:
        describe_topic(admin, topic, bootstrap=bootstrap, timeout=30.0)
    except TopicNotFoundError:
        with contextlib.suppress(TopicConfigError):  # made meanwhile by another `up`
            create_topic(admin, topic, TopicSpec(partitions=3), bootstrap=bootstrap, timeout=30.0)
    ensure_topic(admin, f"{topic}.dlq", partitions=1, timeout=30.0, client=config)
