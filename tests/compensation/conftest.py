"""Fixtures for the compensation service's tests: the service in its own processes.

``service(...)`` starts ``python -m sagacity.cli serve compensation`` against the session's real
broker and Postgres; ``agent()`` is a ``Sagacity`` on the Kafka journal in delegated mode with
the test tools wrapped.  Processes still running at the end are killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sagacity import Sagacity
from sagacity.errors import SagacityError
from sagacity.producer import KafkaJournal
from tests.compensation import svc_tools

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.compensation.svc_tools:shop"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServiceProcess:
    """One running service process."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    marker: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited {self.proc.returncode}:\n{self.logs()}")
            with contextlib.suppress(OSError):
                if self.get("/readyz")[0] == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"service not ready in {timeout}s:\n{self.logs()}")

    def wait_marker(self, timeout: float = 60) -> str:
        assert self.marker is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.marker.exists():
                return self.marker.read_text()
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited {self.proc.returncode}:\n{self.logs()}")
            time.sleep(0.02)
        raise AssertionError(f"failpoint not reached in {timeout}s:\n{self.logs()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.logs().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def metric(self, name: str, **labels: str) -> float:
        _code, text = self.get("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key == (f"{name}{{{want}}}" if want else name):
                return float(value)
        return 0.0


@dataclass
class Lane:
    """One isolated world: a topic, a consumer group and a Postgres schema."""

    bootstrap: str
    topic: str
    dsn: str
    group: str
    tmp: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SAGACITY_") and not k.startswith("SVC_TOOLS_")
        }
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=self.bootstrap,
            SAGACITY_DATABASE_URL=self.dsn,
            SAGACITY_TOPIC=self.topic,
            SAGACITY_COMPENSATION_GROUP=self.group,
            SVC_TOOLS_DSN=self.dsn,
            PYTHONPATH=str(ROOT),
            # In clear, said explicitly; a test of sealed sagas gives its key in ``extra``.
            SAGACITY_ALLOW_CLEAR_DATA="1",
        )
        env.update(extra)
        return env

    def start(
        self,
        *args: str,
        tools: tuple[str, ...] = (TOOLS,),
        failpoint: str | None = None,
        wait: bool = True,
        **env: str,
    ) -> ServiceProcess:
        port = free_port()
        name = uuid.uuid4().hex[:8]
        log = self.tmp / f"service-{name}.log"
        marker = self.tmp / f"failpoint-{name}"
        extra = dict(env)
        if failpoint is not None:
            extra["SAGACITY_COMPENSATION_FAILPOINT"] = failpoint
            extra["SAGACITY_COMPENSATION_FAILPOINT_FILE"] = str(marker)
        command = [sys.executable, "-m", "sagacity.cli", "serve", "compensation"]
        for target in tools:
            command += ["--tools", target]
        command += ["--port", str(port), "--handoff-grace", "2", *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, env=self.env(**extra), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
            )
        service = ServiceProcess(proc=proc, port=port, log=log, marker=marker)
        self.started.append(service)
        if wait:
            service.wait_ready()
        return service

    started: list[ServiceProcess] = field(default_factory=list)

    def agent(self, **options: Any) -> Sagacity:
        journal = KafkaJournal(self.bootstrap, topic=self.topic)
        self.journals.append(journal)
        sagacity = Sagacity(journal, compensation="delegated", **options)
        sagacity.wrap(svc_tools.Shop(self.dsn))
        return sagacity

    journals: list[KafkaJournal] = field(default_factory=list)

    def calls(self) -> list[tuple[str, int, str]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT saga_id, seq, tool FROM undo_calls ORDER BY id").fetchall()
        return [(str(a), int(b), str(c)) for a, b, c in rows]

    def effects(self) -> list[tuple[str, int, str]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT saga_id, seq, tool FROM undo_effects ORDER BY id"
            ).fetchall()
        return [(str(a), int(b), str(c)) for a, b, c in rows]

    def dead_letters(self, want: int, timeout: float = 30) -> list[Any]:
        """The first ``want`` messages of the lane's dead-letter topic (fewer after
        ``timeout``)."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"dlq-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([f"{self.topic}.dlq"])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < want and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    out.append(message)
        finally:
            consumer.close()
        return out

    def close(self) -> None:
        for service in self.started:
            with contextlib.suppress(Exception):
                service.kill()
        for journal in self.journals:
            with contextlib.suppress(SagacityError):
                journal.close()


@pytest.fixture
def make_lane(
    kafka_bootstrap: str, make_topic: Callable[..., str], postgres_dsn: str, tmp_path: Path
) -> Iterator[Callable[..., Lane]]:
    """``make_lane(partitions=3) -> Lane``; each lane has its own topic, group and schema."""
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    lanes: list[Lane] = []
    schemas: list[str] = []

    def make(partitions: int = 3) -> Lane:
        schema = f"comp_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        schemas.append(schema)
        params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
        params["options"] = f"{params.get('options') or ''} -c search_path={schema}".strip()
        dsn = make_conninfo(**params)
        svc_tools.create_schema(dsn)
        tmp = tmp_path / f"lane-{len(lanes)}"
        tmp.mkdir()
        lane = Lane(
            bootstrap=kafka_bootstrap,
            topic=make_topic(partitions=partitions),
            dsn=dsn,
            group=f"compensation-{uuid.uuid4().hex[:8]}",
            tmp=tmp,
        )
        lanes.append(lane)
        return lane

    yield make
    for lane in lanes:
        lane.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
