"""The checkout's development stack: one Kafka broker and one PostgreSQL server.

State lives under :func:`~sagacity.dev._paths.dev_home` (``<project root>/.sagacity/dev``
unless ``SAGACITY_DEV_HOME`` says otherwise): ``kafka/`` and ``postgres/`` each hold their
process's ``state.json`` (pid, ports), so ``up`` from any shell in the checkout finds and
reuses what is running, and ``down`` stops only what this directory started.
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
from sagacity.dev.kafka import KafkaBroker
from sagacity.dev.postgres import PostgresServer

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


class Stack:
    """The Kafka broker and PostgreSQL server of one state directory.

    Args:
        home: state directory; default ``SAGACITY_DEV_HOME`` or ``<project>/.sagacity/dev``.
    """

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home).resolve() if home is not None else dev_home()
        self.kafka = KafkaBroker(self.home / "kafka")
        self.postgres = PostgresServer(self.home / "postgres")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Two `up`s in one checkout (a shell and a test session) must not start two brokers.
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def up(self, *, kafka: bool = True, postgres: bool = True) -> Endpoints:
        """Start (or reuse) the requested services and return where they answer.

        Kafka and PostgreSQL start in parallel. If one fails, one this call started is
        stopped again before the error propagates.

        Raises:
            MissingToolError: Java, Maven or PostgreSQL is not installed.
            ProcessStartError: a server did not start; the message ends with its log.
        """
        with self._locked():
            kafka_was = kafka and self.kafka.is_running()
            pg_was = postgres and self.postgres.is_running()
            with ThreadPoolExecutor(max_workers=2) as pool:
                kafka_job = pool.submit(self.kafka.start) if kafka else None
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
                    self.kafka.stop()
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
            if kafka and self.kafka.stop():
                stopped.append("kafka")
            if postgres and self.postgres.stop():
                stopped.append("postgres")
        return stopped

    def purge(self) -> None:
        """Stop both services and delete all their data and state."""
        with self._locked():
            self.kafka.purge()
            self.postgres.purge()
        shutil.rmtree(self.home, ignore_errors=True)

    def status(self) -> list[ServiceStatus]:
        """The recorded state of each service and whether it answers now."""
        kafka_state = self.kafka.state()
        pg_state = self.postgres.state()
        return [
            ServiceStatus(
                name="kafka",
                running=self.kafka.is_running(),
                pid=kafka_state.pid if kafka_state else None,
                address=f"127.0.0.1:{kafka_state.port}" if kafka_state else None,
            ),
            ServiceStatus(
                name="postgres",
                running=self.postgres.is_running(),
                pid=pg_state.pid if pg_state else None,
                address=self.postgres.dsn() if pg_state else None,
            ),
        ]
