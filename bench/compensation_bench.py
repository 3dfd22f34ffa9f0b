"""Benchmark: the compensation service's reaction time and throughput on the local broker.

Run ``python -m bench.compensation_bench`` (or ``python bench/compensation_bench.py``).  It uses
``SAGACITY_BOOTSTRAP_SERVERS`` / ``SAGACITY_DATABASE_URL`` when set, otherwise starts this
checkout's local stack (and stops it again), prints a table and writes it into
``docs/performance.md``.

Measured, with the service in its own processes (``python -m sagacity.cli serve compensation``):
1. Latency: from the agent's ``COMPENSATION_REQUESTED`` acknowledged by the broker to the first
   undo call started (its start time is written to Postgres by the undo itself), one saga at a
   time, p50 / p95.
2. Throughput: sagas of three compensable steps each, all requested before the service starts;
   sagas compensated per second with one and with two instances, from the first undo call to
   the last step recorded compensated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench._compensation_tools import SCHEMA, Payments
from bench._runinfo import Stamp
from sagacity import EntryDraft, EventType, JournalEntry, Sagacity, SagaStatus
from sagacity.journal import ApprovalRequest, Journal
from sagacity.producer import KafkaJournal

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "docs" / "performance.md"
START, END = "<!-- compensation-bench:start -->", "<!-- compensation-bench:end -->"
TOOLS = "bench._compensation_tools:tools"


class _Timed:
    """A journal recording when each ``COMPENSATION_REQUESTED`` append was acknowledged."""

    def __init__(self, inner: Journal) -> None:
        self.inner = inner
        self.acked: dict[str, float] = {}

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        entry = self.inner.append(draft, durable=durable)
        if draft.event_type is EventType.COMPENSATION_REQUESTED:
            self.inner.flush()
            self.acked[draft.saga_id] = time.time()
        return entry

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return self.append(draft, durable=durable)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        return self.inner.entries(saga_id)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        return self.inner.pending_approvals(saga_id)

    def close(self) -> None:
        self.inner.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _infrastructure() -> Iterator[tuple[str, str]]:
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    dsn = os.environ.get("SAGACITY_DATABASE_URL")
    if bootstrap and dsn:
        yield bootstrap, dsn
        return
    from sagacity.dev import Stack

    stack = Stack()
    endpoints = stack.up(kafka=True, postgres=True)
    try:
        assert endpoints.bootstrap_servers
        assert endpoints.database_url
        yield endpoints.bootstrap_servers, endpoints.database_url
    finally:
        stack.down(kafka="kafka" in endpoints.started, postgres="postgres" in endpoints.started)


class World:
    """A topic, a Postgres schema and the service processes of one measurement."""

    def __init__(self, bootstrap: str, dsn: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = f"bench.compensation.{uuid.uuid4().hex[:10]}"
        self.group = f"bench-compensation-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, num_partitions=partitions)])[self.topic].result(
            timeout=30
        )
        self.schema = f"bench_{uuid.uuid4().hex[:10]}"
        self.root_dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        params: dict[str, Any] = conninfo_to_dict(dsn)
        params["options"] = f"{params.get('options') or ''} -c search_path={self.schema}".strip()
        self.dsn = make_conninfo(**params)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        self.procs: list[tuple[subprocess.Popen[bytes], int]] = []
        self.journal = KafkaJournal(bootstrap, topic=self.topic)
        self.timed = _Timed(self.journal)
        self.agent = Sagacity(self.timed, compensation="delegated")
        self.agent.wrap(Payments(self.dsn))

    def start_service(self) -> None:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=self.bootstrap,
            SAGACITY_DATABASE_URL=self.dsn,
            SAGACITY_TOPIC=self.topic,
            SAGACITY_COMPENSATION_GROUP=self.group,
            SAGACITY_COMPENSATION_LOG_LEVEL="WARNING",
            # Measured in clear, said explicitly (the services refuse otherwise).
            SAGACITY_ALLOW_CLEAR_DATA="1",
            BENCH_TOOLS_DSN=self.dsn,
            PYTHONPATH=str(ROOT),
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sagacity.cli",
                "serve",
                "compensation",
                "--tools",
                TOOLS,
                "--port",
                str(port),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append((proc, port))

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for proc, port in self.procs:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited with {proc.returncode}")
                with contextlib.suppress(OSError):
                    url = f"http://127.0.0.1:{port}/readyz"
                    with urllib.request.urlopen(url, timeout=2) as response:
                        if response.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError("the service did not become ready")
                time.sleep(0.05)

    def fail(self, saga: str, steps: int) -> None:
        charge = self.agent.registry.get("charge")
        assert charge is not None

        def work() -> None:
            for n in range(steps):
                charge.wrapped(order=f"{saga}-{n}", amount=n)
            raise RuntimeError("card declined")

        result = self.agent.saga(saga, work)
        assert result.status is SagaStatus.COMPENSATION_PENDING

    def calls(self) -> dict[str, float]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT saga_id, min(started_at) FROM bench_undo_calls GROUP BY saga_id"
            ).fetchall()
        return {str(s): float(t) for s, t in rows}

    def compensated_steps(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM sagacity_compensation_claims WHERE status = 'COMPENSATED'"
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        for proc, _port in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _port in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.journal.close()
        with psycopg.connect(self.root_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema)))
        AdminClient({"bootstrap.servers": self.bootstrap}).delete_topics([self.topic])


def measure_latency(bootstrap: str, dsn: str, sagas: int) -> list[float]:
    world = World(bootstrap, dsn, partitions=6)
    try:
        world.start_service()
        world.wait_ready()
        latencies: list[float] = []
        for n in range(sagas + 5):
            saga = f"lat-{n}-{uuid.uuid4().hex[:6]}"
            world.fail(saga, steps=1)
            deadline = time.monotonic() + 30
            while True:
                started = world.calls().get(saga)
                if started is not None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"saga {saga} was not compensated in 30s")
                time.sleep(0.005)
            if n >= 5:  # the first few warm the consumer and the connections up
                latencies.append((started - world.timed.acked[saga]) * 1000)
        return latencies
    finally:
        world.close()


def measure_throughput(bootstrap: str, dsn: str, sagas: int, instances: int) -> float:
    world = World(bootstrap, dsn, partitions=6)
    try:
        for n in range(sagas):
            world.fail(f"tp-{n}-{uuid.uuid4().hex[:6]}", steps=3)
        for _ in range(instances):
            world.start_service()
        world.wait_ready()
        deadline = time.monotonic() + 600
        while world.compensated_steps() < 3 * sagas:
            if time.monotonic() > deadline:
                raise RuntimeError("compensation did not finish in 600s")
            time.sleep(0.05)
        finished = time.time()
        first = min(world.calls().values())
        return sagas / (finished - first)
    finally:
        world.close()


def _machine() -> str:
    return (
        f"{platform.node()}: {platform.system()} {platform.release()}, {os.cpu_count()} CPU(s) "
        f"({platform.machine()}), Python {platform.python_version()}, confluent-kafka "
        f"{metadata.version('confluent-kafka')}"
    )


def _write(section: str) -> None:
    text = PERF.read_text() if PERF.exists() else "# Performance\n\nMeasured figures.\n"
    block = f"{START}\n{section}\n{END}"
    if START in text and END in text:
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    PERF.write_text(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-sagas", type=int, default=200)
    parser.add_argument("--throughput-sagas", type=int, default=300)
    parser.add_argument("--no-write", action="store_true", help="Do not update the docs.")
    args = parser.parse_args(argv)
    stamp = Stamp()
    with _infrastructure() as (bootstrap, dsn):
        latencies = measure_latency(bootstrap, dsn, args.latency_sagas)
        one = measure_throughput(bootstrap, dsn, args.throughput_sagas, 1)
        two = measure_throughput(bootstrap, dsn, args.throughput_sagas, 2)
    p50, p95 = _pct(latencies, 0.5), _pct(latencies, 0.95)
    rows = [
        "| measure | value | target |",
        "| --- | ---: | --- |",
        f"| request acknowledged → first undo call, p50 (ms) | {p50:.1f} | < 50 "
        f"{'✓' if p50 < 50 else '✗'} |",
        f"| request acknowledged → first undo call, p95 (ms) | {p95:.1f} | < 250 "
        f"{'✓' if p95 < 250 else '✗'} |",
        f"| request acknowledged → first undo call, mean (ms) | "
        f"{statistics.fmean(latencies):.1f} | |",
        f"| sagas compensated/s (3 steps each), 1 instance | {one:.1f} | |",
        f"| sagas compensated/s (3 steps each), 2 instances | {two:.1f} | |",
    ]
    section = "\n".join(
        [
            "## Compensation service (`python -m bench.compensation_bench`)",
            "",
            f"{stamp.line()} On {_machine()}; the local broker and PostgreSQL; topics of 6 "
            f"partitions; service defaults (concurrency 4, `fetch.wait.max.ms=50`, "
            f"`fetch.min.bytes=1`). Latency over {len(latencies)} sagas run one at a time; "
            f"throughput over {args.throughput_sagas} sagas requested before the instances "
            "started.",
            "",
            *rows,
            "",
            "Per saga the service reads the saga, takes it over with one confirmed "
            "`SAGA_OPENED` (a produce and a read-back, both continuing that read: "
            "docs/adr/0004-single-writer.md), then journals each step on the journal's hot "
            "path (one acknowledged produce per event) around a Postgres claim per undo. The "
            "bench's database holds no archive, so the first read scans the saga's partition "
            "(docs/adr/0010-saga-read-index.md; `python -m bench.read_bench` measures the "
            "index). The latency includes "
            "the requesting run's own `SAGA_ENDED`, which the service waits for before writing. "
            "Both instances share this machine's two CPUs (with other work) and the "
            "second one's join rebalances the group during the run, so here a second "
            "instance adds little; instances on separate machines were not measured. "
            "Runs vary.",
        ]
    )
    print(section)
    if not args.no_write:
        _write(section)


if __name__ == "__main__":
    main()
