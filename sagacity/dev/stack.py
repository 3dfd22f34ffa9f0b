"""The checkout's development stack: Kafka (one broker, or a cluster) and one PostgreSQL server.

State lives under :func:`~sagacity.dev._paths.dev_home` (``<project root>/.sagacity/dev``
unless ``SAGACITY_DEV_HOME`` says otherwise): ``kafka/`` and ``postgres/`` each hold their
process's ``state.json`` (pid, ports), so ``up`` from any shell in the checkout finds and
reuses what is running, and ``down`` stops only what this directory started. A cluster
(``up(brokers=3)``) lives in ``kafka-cluster/`` instead of ``kafka/``; once one is recorded
there, the stack's Kafka is that cluster until it is purged.
"""

from __future__ import annotations

import fcntl
import shlex
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sagacity.dev._paths import dev_home
from sagacity.dev.cluster import KafkaCluster
from sagacity.dev.kafka import KafkaBroker
from sagacity.dev.postgres import PostgresServer
from sagacity.errors import DevStackError

BOOTSTRAP_VAR = "SAGACITY_BOOTSTRAP_SERVERS"
DATABASE_VAR = "SAGACITY_DATABASE_URL"


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where the stack's services answer, and which of them this call started."""

    bootstrap_servers: str | None = None
    database_url: str | None = None
    started: frozenset[str] = field(default_factory=frozenset)

    def export_lines(self) -> list[str]:
        """``export VAR=value`` lines a POSIX shell can ``eval``."""
        lines = []
        if self.bootstrap_servers is not None:
            lines.append(f"export {BOOTSTRAP_VAR}={shlex.quote(self.bootstrap_servers)}")
        if self.database_url is not None:
            lines.append(f"export {DATABASE_VAR}={shlex.quote(self.database_url)}")
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
        self.kafka = KafkaBroker(self.home / "kafka")
        self.postgres = PostgresServer(self.home / "postgres")
        self.cluster_home = self.home / "kafka-cluster"

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
        return KafkaCluster(self.cluster_home, brokers=size)

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

    def up(self, *, kafka: bool = True, postgres: bool = True, brokers: int = 1) -> Endpoints:
        """Start (or reuse) the requested services and return where they answer.

        Kafka and PostgreSQL start in parallel. If one fails, one this call started is
        stopped again before the error propagates.

        Args:
            kafka: start Kafka.
            postgres: start PostgreSQL.
            brokers: 1 for a single broker, more for a local cluster of that many nodes
                (recorded: later calls must ask for the same size until a purge).

        Raises:
            MissingToolError: Java, Maven or PostgreSQL is not installed.
            ProcessStartError: a server did not start; the message ends with its log.
            DevStackError: ``brokers`` differs from what this stack runs.
        """
        with self._locked():
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
            started = {
                name
                for name, wanted, was in (
                    ("kafka", kafka, kafka_was),
                    ("postgres", postgres, pg_was),
                )
                if wanted and not was
            }
            return Endpoints(
                bootstrap_servers=bootstrap, database_url=dsn, started=frozenset(started)
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
