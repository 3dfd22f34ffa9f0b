"""Fault injection: sagas under broker, service and database faults, then a Jepsen-style check.

Run ``python -m bench.faults`` (ten minutes) or ``python -m bench.faults --quick`` (about two
minutes, CI). It brings up a private three-node KRaft cluster and a private PostgreSQL server
under ``.sagacity/faults/`` (never the checkout's shared stack), creates a journal topic of
replication 3 with ``min.insync.replicas=2``, and runs:

* agents in several processes (``bench._fault_agent``): sagas that complete, sagas that fail
  after two compensable steps (compensation delegated to the service) and sagas gated on an
  ``IRREVERSIBLE`` wire, approved and resumed through the approvals service;
* the approvals service, the compensation service and the archive, two instances each (so
  their consumer groups rebalance under the faults);

while a nemesis kills brokers (``kill -9``) and restarts them, pauses one (SIGSTOP: a zombie
leader until the controllers fence it), restarts one cleanly, ``kill -9``'s a random instance
of each service at random moments (each is restarted), and restarts PostgreSQL once. Then the
faults stop, the cluster heals, the services catch up, and the checker reads the topic from
the start and the archive and counts, per saga: acknowledged events lost, duplicated or
reordered on the topic; events missing from or doubled in the archive; undos whose effect
happened zero times or more than once (from the tools' own side-effect table); chains that
fail ``verify``. It prints the table and exits 1 unless every count is zero.

``--replication 1`` runs the same load against a topic of replication 1 on a single broker,
without faults, until the broker is killed and its disk wiped: the table then shows what was
lost (documented in docs/reliability.md, not a failure). ``--write`` puts the summary of a
replication-3 run into docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from confluent_kafka.admin import AdminClient
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench import _fault_tools
from sagacity import EventType, verify
from sagacity.chain._acceptance import ForkKind
from sagacity.consumers.compensation import pending_request
from sagacity.dev import KafkaBroker, PostgresServer, pick_free_port
from sagacity.dev.cluster import KafkaCluster
from sagacity.producer._reader import SagaRead, SagaReader
from sagacity.producer._topic import DAY_MS, TopicSpec, create

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
MARKERS = {
    3: ("<!-- faults-run:start -->", "<!-- faults-run:end -->"),
    1: ("<!-- faults-rf1:start -->", "<!-- faults-rf1:end -->"),
}
TOOLS = "bench._fault_tools:tools"
PARTITIONS = 6
SERVICE_COUNTS = {"approvals": 2, "compensation": 2, "archive": 2}
CHECKS = (
    ("topic", "lost"),
    ("topic", "duplicated"),
    ("topic", "reordered"),
    ("archive", "missing"),
    ("archive", "doubled"),
    ("undo", "called zero times"),
    ("undo", "called twice or more"),
    ("chain", "fails verify"),
)


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- processes -------------------------------------------------------------------------------
@dataclass
class Service:
    """One service instance, restarted by the supervisor whenever it dies."""

    kind: str
    index: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(self.ready_url, timeout=2) as response,
        ):
            return bool(response.status == 200)
        return False

    def kill(self) -> bool:
        if not self.alive():
            return False
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        return True

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@dataclass
class Faults:
    """What the nemesis did."""

    service_kills: Counter[str] = field(default_factory=Counter)
    broker: Counter[str] = field(default_factory=Counter)
    postgres_restarts: int = 0
    log: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')} {text}")


class Kafka:
    """The run's Kafka: a three-node cluster, or (replication 1) one broker."""

    def __init__(self, home: Path, replication: int) -> None:
        self.replication = replication
        self.cluster = KafkaCluster(home / "kafka-cluster", brokers=3) if replication > 1 else None
        self.single = KafkaBroker(home / "kafka-single") if replication == 1 else None

    def start(self) -> str:
        if self.cluster is not None:
            return self.cluster.start()
        assert self.single is not None
        return self.single.start()

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop(timeout=10.0)
        if self.single is not None:
            self.single.stop(timeout=10.0)


# --- the run ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Plan:
    duration_s: float
    agents: int
    service_kill_every_s: float
    broker_fault_every_s: float
    pace_s: float
    settle_s: float
    replication: int
    seed: int
    home: Path


class Run:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.run_id = uuid.uuid4().hex[:8]
        self.dir = plan.home / f"run-{self.run_id}"
        self.dir.mkdir(parents=True)
        self.kafka = Kafka(plan.home, plan.replication)
        self.pg = PostgresServer(plan.home / "postgres")
        self.faults = Faults()
        self.services: list[Service] = []
        self.stop_faults = threading.Event()
        self.stop_supervisor = threading.Event()
        self.lock = threading.Lock()
        self.topic = f"faults-{self.run_id}"
        self.bootstrap = ""
        self.dsn = ""
        self.base_dsn = ""
        self.approvals_url = ""
        self.approvals_public_key = ""
        self.token = ""
        self.public_key = ""
        self.pg_port = 0
        self.skipped = 0

    # -- infrastructure ---------------------------------------------------------------------
    def start_infrastructure(self) -> None:
        _say(f"starting Kafka ({'3 brokers' if self.plan.replication > 1 else '1 broker'})")
        self.bootstrap = self.kafka.start()
        self.base_dsn = self.pg.start()
        self.pg_port = int(self.base_dsn.rsplit(":", 1)[1].split("/", 1)[0])
        schema = f"run_{self.run_id}"
        with psycopg.connect(self.base_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        params: dict[str, Any] = conninfo_to_dict(self.base_dsn)
        params["options"] = f"-c search_path={schema}"
        self.dsn = make_conninfo(**params)
        _fault_tools.create_schema(self.dsn)
        rf = self.plan.replication
        spec = TopicSpec(
            partitions=PARTITIONS,
            replication_factor=rf,
            min_insync_replicas=max(1, rf - 1),
            retention_ms=DAY_MS,
        )
        self._create_topic(spec)
        _say(f"kafka {self.bootstrap}, topic {self.topic} (replication {rf}), postgres {self.dsn}")

    def _create_topic(self, spec: TopicSpec) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        create(admin, self.topic, spec, bootstrap=self.bootstrap, timeout=60)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=self.bootstrap,
            SAGACITY_DATABASE_URL=self.dsn,
            SAGACITY_TOPIC=self.topic,
            SAGACITY_ACK_TIMEOUT_S="20",
            # Measured in clear, said explicitly (the services refuse otherwise).
            SAGACITY_ALLOW_CLEAR_DATA="1",
            FAULT_TOOLS_DSN=self.dsn,
            PYTHONPATH=str(ROOT),
        )
        key = self.dir / "approvals.key"
        if key.exists():
            # Every approvals replica signs with the same key; agents, the compensation
            # service and the archive pin it (docs/adr/0014-signed-decisions-and-writers.md).
            env.update(
                SAGACITY_APPROVALS_SIGNING_KEY=str(key),
                SAGACITY_APPROVALS_PUBLIC_KEY=self.approvals_public_key,
            )
        env.update(extra)
        return env

    # -- services ---------------------------------------------------------------------------
    def start_services(self) -> None:
        from sagacity.consumers.approvals._auth import auth_entry, new_token
        from sagacity.consumers.archive import generate_key

        self.token = new_token()
        auth = self.dir / "approvals-auth.toml"
        auth.write_text(auth_entry("fault-approver", self.token, ["*"]), encoding="utf-8")
        signer = generate_key(self.dir / "archive.key")
        self.public_key = signer.public_hex
        from sagacity.signing._decision_signature import generate_key as generate_decision_key

        self.approvals_public_key = generate_decision_key(self.dir / "approvals.key").public_hex
        cli = [sys.executable, "-m", "sagacity.cli"]
        group = f"faults-{self.run_id}"
        for kind, count in SERVICE_COUNTS.items():
            for index in range(1, count + 1):
                port = pick_free_port()
                if kind == "approvals":
                    urls = [u for u in self.approvals_url.split(",") if u]
                    self.approvals_url = ",".join([*urls, f"http://127.0.0.1:{port}"])
                    argv = [*cli, "serve", "approvals", "--auth", str(auth), "--tools", TOOLS,
                            "--port", str(port), "--group", f"{group}-approvals",
                            "--log-level", "warning"]  # fmt: skip
                    ready = f"http://127.0.0.1:{port}/healthz"
                elif kind == "compensation":
                    argv = [*cli, "serve", "compensation", "--tools", TOOLS,
                            "--group", f"{group}-compensation", "--port", str(port),
                            "--handoff-grace", "2", "--log-level", "INFO"]  # fmt: skip
                    ready = f"http://127.0.0.1:{port}/readyz"
                else:
                    argv = [*cli, "serve", "archive", "--bootstrap-servers", self.bootstrap,
                            "--database-url", self.dsn, "--topic", self.topic,
                            "--group", f"{group}-archive", "--batch-size", "200",
                            "--signing-key", str(self.dir / "archive.key"),
                            "--checkpoint-interval", "5", "--port", str(port)]  # fmt: skip
                    ready = f"http://127.0.0.1:{port}/healthz"
                service = Service(
                    kind=kind,
                    index=index,
                    argv=argv,
                    env=self.env(),
                    log=self.dir / f"{kind}-{index}.log",
                    ready_url=ready,
                )
                service.start()
                self.services.append(service)
        deadline = time.monotonic() + 180
        for service in self.services:
            while not service.ready():
                if not service.alive():
                    raise SystemExit(f"{service.name} exited:\n{_tail(service.log)}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"{service.name} not ready:\n{_tail(service.log)}")
                time.sleep(0.3)
        _say("services ready: " + ", ".join(s.name for s in self.services))

    def supervise(self) -> None:
        """Restart every service that died (a second after it did)."""
        while not self.stop_supervisor.wait(0.5):
            for service in self.services:
                with self.lock:
                    if not service.alive():
                        time.sleep(1.0)
                        service.start()

    def kill_services(self, kind: str) -> None:
        """``kill -9`` a random instance of ``kind`` at random moments."""
        every = self.plan.service_kill_every_s
        pool = [s for s in self.services if s.kind == kind]
        while not self.stop_faults.wait(self.rng.uniform(0.5 * every, 1.5 * every)):
            victim = self.rng.choice(pool)
            with self.lock:
                if victim.kill():
                    self.faults.service_kills[kind] += 1

    # -- brokers and the database -----------------------------------------------------------
    def break_brokers(self) -> None:
        """One broker fault at a time, in turn: kill -9 then restart, pause then resume, a
        clean restart."""
        cluster = self.kafka.cluster
        assert cluster is not None
        actions = ("kill", "pause", "restart")
        turn = 0
        while not self.stop_faults.wait(self.plan.broker_fault_every_s):
            node = self.rng.randint(1, 3)
            action = actions[turn % len(actions)]
            turn += 1
            try:
                if action == "kill":
                    cluster.kill(node)
                    self.faults.note(f"kafka-{node} killed (-9)")
                    self.stop_faults.wait(self.rng.uniform(3, 8))
                    cluster.restart(node)
                    self.faults.note(f"kafka-{node} restarted after the kill")
                elif action == "pause":
                    cluster.pause(node)
                    self.faults.note(f"kafka-{node} paused (SIGSTOP)")
                    # Longer than the controllers' session timeout (9 s): it is fenced.
                    self.stop_faults.wait(self.rng.uniform(10, 15))
                    cluster.resume(node)
                    self.faults.note(f"kafka-{node} resumed")
                else:
                    cluster.restart(node)
                    self.faults.note(f"kafka-{node} restarted cleanly")
                self.faults.broker[action] += 1
            except Exception as exc:  # a fault that failed to apply is reported, not fatal
                self.faults.note(f"kafka-{node} {action} failed: {exc}"[:300])
        for node in range(1, 4):
            cluster.resume(node)

    def restart_postgres(self, at: float) -> None:
        if self.stop_faults.wait(at):
            return
        self.faults.note("postgres stopped")
        self.pg.stop()
        time.sleep(2)
        PostgresServer(self.pg.home, port=self.pg_port).start()
        self.faults.postgres_restarts += 1
        self.faults.note("postgres started again")

    def heal(self) -> None:
        if self.kafka.cluster is not None:
            for node in range(1, 4):
                self.kafka.cluster.resume(node)
            self.kafka.cluster.start()
        if not self.pg.is_running():
            PostgresServer(self.pg.home, port=self.pg_port).start()

    # -- agents -----------------------------------------------------------------------------
    def start_agents(self, deadline_at: float) -> list[subprocess.Popen[bytes]]:
        env = self.env(
            FAULT_APPROVALS_URL=self.approvals_url,
            FAULT_APPROVER_TOKEN=self.token,
            FAULT_PACE_S=str(self.plan.pace_s),
        )
        agents = []
        for i in range(self.plan.agents):
            log = (self.dir / f"agent-{i}.log").open("wb")
            agents.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench._fault_agent",
                        f"a{i}-{self.run_id}",
                        str(deadline_at),
                        str(self.dir / f"acks-{i}.jsonl"),
                    ],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        return agents

    def acks(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for path in sorted(self.dir.glob("acks-*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    out[record["saga"]] = record
        return out

    # -- reading back -----------------------------------------------------------------------
    def read_topic(self) -> dict[str, SagaRead]:
        config: dict[str, str | int | float | bool] = {"bootstrap.servers": self.bootstrap}
        # After a wiped disk the topic may have come back with other settings (auto-created).
        meta = AdminClient(config).list_topics(timeout=60).topics.get(self.topic)
        partitions = len(meta.partitions) if meta is not None and meta.partitions else 0
        reader = SagaReader(config, self.topic, partitions=max(1, partitions), timeout=120)
        sagas: dict[str, SagaRead] = {}
        skipped = 0
        try:
            for partition in range(partitions):
                read = reader.read_partition(partition)
                sagas.update(read.sagas)
                skipped += len(read.skipped)
        finally:
            reader.close()
        self.skipped = skipped
        return sagas

    def read_archive(self) -> tuple[Counter[tuple[str, int, str]], dict[str, tuple[int, str]]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT saga_id, seq, hash FROM side_effect_journal").fetchall()
            heads = conn.execute("SELECT saga_id, head_seq, head_hash FROM archive_saga_head")
            head_map = {str(s): (int(n), str(h)) for s, n, h in heads.fetchall()}
        return Counter((str(s), int(n), str(h)) for s, n, h in rows), head_map

    def read_effects(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        with psycopg.connect(self.dsn) as conn:
            effects = conn.execute("SELECT key FROM fault_undo_effects").fetchall()
            calls = conn.execute("SELECT key FROM fault_undo_calls").fetchall()
            wires = conn.execute("SELECT saga_id FROM fault_wires").fetchall()
        return (
            Counter(str(k) for (k,) in effects),
            Counter(str(k) for (k,) in calls),
            Counter(str(s) for (s,) in wires),
        )

    def settled(self) -> tuple[bool, str]:
        """Whether every requested compensation has ended and the archive has every chain."""
        sagas = self.read_topic()
        unfinished = [s for s, read in sagas.items() if _needs_compensation(read.entries)]
        _, heads = self.read_archive()
        behind = [s for s, read in sagas.items() if read.entries and heads.get(s) != read.tail]
        return (not unfinished and not behind), (
            f"{len(unfinished)} compensations unfinished, archive behind on {len(behind)} sagas"
        )


def _final_status(entries: list[Any]) -> str | None:
    for entry in reversed(entries):
        if entry.event_type is EventType.SAGA_ENDED:
            return str(entry.result).strip('"')
    return None


def _needs_compensation(entries: list[Any]) -> bool:
    """A compensation was requested and has not ended (no final ``SAGA_ENDED`` after it)."""
    return pending_request(entries) is not None


def _ended_for_a_person(entries: list[Any]) -> bool:
    """Compensated as far as it can be, the rest left to a person (``COMPENSATION_FAILED``:
    a step in doubt, such as an approved call whose resume died before its outcome)."""
    requested = any(e.event_type is EventType.COMPENSATION_REQUESTED for e in entries)
    return requested and _final_status(entries) == "COMPENSATION_FAILED"


def _open_after_resume(entries: list[Any]) -> bool:
    """A resume began (an ``INTENT`` after an ``APPROVED``) but no ``SAGA_ENDED`` came after
    it: the resuming process died before or after the call, before the saga ended."""
    for index, entry in enumerate(entries):
        if entry.event_type is EventType.APPROVED:
            after = entries[index + 1 :]
            began = any(e.event_type is EventType.INTENT for e in after)
            return began and not any(e.event_type is EventType.SAGA_ENDED for e in after)
    return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- the checker -----------------------------------------------------------------------------
@dataclass
class Verdict:
    counts: dict[tuple[str, str], list[int]]
    """(area, what) -> [events, sagas]."""
    info: dict[str, int]
    sagas: Counter[str]
    acked_events: int
    examples: list[str]

    @property
    def ok(self) -> bool:
        """Every count zero, over a run that acknowledged something (an empty run proves
        nothing)."""
        clean = all(events == 0 and sagas == 0 for events, sagas in self.counts.values())
        return clean and self.acked_events > 0


@dataclass(frozen=True, kw_only=True)
class Observed:
    """Everything the checker reads, gathered once after the run.

    Attributes:
        acks: per saga, the agent's record (kind, status, acknowledged ``[seq, hash]`` pairs).
        topic: per saga, the topic's read (accepted chain, rejected events).
        archive: ``(saga, seq, hash)`` rows of the archive, counted.
        effects / calls: per idempotency key ``saga:seq``, undo effects and undo calls.
        wires: per saga, executions of the gated wire.
        skipped: undecodable messages on the topic.
    """

    acks: dict[str, dict[str, Any]]
    topic: dict[str, SagaRead]
    archive: Counter[tuple[str, int, str]]
    effects: Counter[str]
    calls: Counter[str]
    wires: Counter[str]
    skipped: int = 0


def observe(run: Run) -> Observed:
    """Read the agents' records, the topic from the start, the archive and the tools' tables."""
    topic = run.read_topic()
    archive, _heads = run.read_archive()
    effects, calls, wires = run.read_effects()
    return Observed(
        acks=run.acks(),
        topic=topic,
        archive=archive,
        effects=effects,
        calls=calls,
        wires=wires,
        skipped=run.skipped,
    )


def check(seen: Observed) -> Verdict:
    """Count, per saga, what the topic, the archive and the side-effect tables say."""
    acks, sagas, archive = seen.acks, seen.topic, seen.archive
    effects, calls, wires = seen.effects, seen.calls, seen.wires
    counts: dict[tuple[str, str], list[int]] = {key: [0, 0] for key in CHECKS}
    info: Counter[str] = Counter()
    examples: list[str] = []

    def count(key: tuple[str, str], saga: str, events: int, detail: str = "") -> None:
        if events:
            counts[key][0] += events
            counts[key][1] += 1
            if len(examples) < 20:
                examples.append(f"{key[0]} {key[1]}: {saga} {detail}".strip())

    archived_by_saga: dict[str, Counter[tuple[int, str]]] = {}
    for (saga, seq, digest), n in archive.items():
        archived_by_saga.setdefault(saga, Counter())[(seq, digest)] += n
    kinds: Counter[str] = Counter()
    acked_events = 0
    for saga in sorted(set(acks) | set(sagas) | set(archived_by_saga)):
        record = acks.get(saga, {})
        kinds[record.get("kind", "unknown")] += 1
        if record.get("status") == "ERROR":
            info["sagas whose run raised (nothing counted as acknowledged)"] += 1
        read = sagas.get(saga)
        accepted = {(e.seq, e.hash) for e in read.entries} if read else set()
        rejected = list(read.rejected) if read else []
        rejected_pairs = {(r.entry.seq, r.entry.hash) for r in rejected}
        acked = {(int(s), str(h)) for s, h in record.get("events", [])}
        acked_events += len(acked)
        missing = acked - accepted
        lost = missing - rejected_pairs
        count(("topic", "lost"), saga, len(lost), str(sorted(lost)[:3]))
        archived = archived_by_saga.get(saga, Counter())
        if lost:
            kept = sum(1 for pair in lost if archived.get(pair))
            info["topic: lost events still in the archive"] += kept
            info["topic: lost events in neither topic nor archive"] += len(lost) - kept
        count(("topic", "reordered"), saga, len(missing & rejected_pairs))
        dupes = [r for r in rejected if r.kind is ForkKind.DUPLICATE]
        count(("topic", "duplicated"), saga, len(dupes))
        info["topic: forks (writes the chain rejected)"] += sum(
            1 for r in rejected if r.kind is not ForkKind.DUPLICATE
        )
        if read is not None and read.entries:
            verdict = verify(read.entries, saga_id=saga)
            count(("chain", "fails verify"), saga, 0 if verdict.ok else 1, str(verdict))
        count(("archive", "missing"), saga, len(accepted - set(archived)))
        doubled = sum(n - 1 for n in archived.values() if n > 1)
        # An archived event at a seq the chain holds with another hash (a fork archived);
        # one past the chain's end is an event the topic lost, counted above.
        chain_hash = {e.seq: e.hash for e in read.entries} if read else {}
        conflicting = sum(
            n for (seq, digest), n in archived.items() if chain_hash.get(seq, digest) != digest
        )
        count(("archive", "doubled"), saga, doubled + conflicting)
        # Undos: each executed step of a saga handed to compensation has its effect once.
        entries = read.entries if read else []
        requested = any(e.event_type is EventType.COMPENSATION_REQUESTED for e in entries)
        steps = {
            f"{saga}:{e.seq}"
            for e in entries
            if e.event_type is EventType.EXECUTED and e.tool in ("charge", "reserve")
        }
        expected = steps if requested else set()
        zero = [k for k in expected if effects.get(k, 0) == 0]
        count(("undo", "called zero times"), saga, len(zero))
        over = [k for k, n in effects.items() if k.rsplit(":", 1)[0] == saga and n > 1]
        # A step undone that its chain did not hand to compensation (judged only where the
        # topic still has the chain).
        spurious = [
            k for k in effects if k.rsplit(":", 1)[0] == saga and k not in expected and entries
        ]
        count(("undo", "called twice or more"), saga, len(over) + len(spurious))
        info["undo: repeat calls absorbed by the idempotency key"] += sum(
            max(0, calls[k] - 1) for k in steps
        )
        if record.get("kind") == "gated" and record.get("approved_status") == "COMPLETED":
            info["gated: approved wire not run exactly once"] += int(wires.get(saga, 0) != 1)
        if record.get("kind") == "gated" and record.get("approved_status") not in (
            None,
            "COMPLETED",
        ):
            info["gated: not completed when the run ended"] += 1
        if _open_after_resume(entries):
            info["gated: resume interrupted, saga never ended"] += 1
        if _needs_compensation(entries):
            info["sagas: compensation unfinished"] += 1
        elif _ended_for_a_person(entries):
            info["sagas: compensation ended COMPENSATION_FAILED (a person decides)"] += 1
    info["topic: undecodable messages"] = seen.skipped
    return Verdict(
        counts=counts, info=dict(info), sagas=kinds, acked_events=acked_events, examples=examples
    )


def table(verdict: Verdict, faults: Faults, plan: Plan, elapsed: float) -> str:
    lines = [
        f"sagas {sum(verdict.sagas.values())} "
        f"({', '.join(f'{k} {n}' for k, n in sorted(verdict.sagas.items()))}), "
        f"acknowledged events {verdict.acked_events}, run {elapsed:.0f}s",
        "",
        "| check | events | sagas |",
        "| --- | ---: | ---: |",
    ]
    for (area, what), (events, sagas) in verdict.counts.items():
        lines.append(f"| {area}: {what} | {events} | {sagas} |")
    lines += ["", "| also counted (not failures) | n |", "| --- | ---: |"]
    for name, n in sorted(verdict.info.items()):
        lines.append(f"| {name} | {n} |")
    lines += ["", "| faults injected | n |", "| --- | ---: |"]
    for kind in SERVICE_COUNTS:
        lines.append(f"| kill -9 {kind} ({SERVICE_COUNTS[kind]} instance(s)) | "
                     f"{faults.service_kills[kind]} |")  # fmt: skip
    if plan.replication == 1:
        lines.append(f"| the broker killed, its disk wiped, restarted | {faults.broker['wipe']} |")
    else:
        lines.append(f"| broker kill -9 then restart | {faults.broker['kill']} |")
        lines.append(f"| broker paused (SIGSTOP) 10-15 s | {faults.broker['pause']} |")
        lines.append(f"| broker clean restart | {faults.broker['restart']} |")
        lines.append(f"| PostgreSQL restart | {faults.postgres_restarts} |")
    lines.append("")
    if plan.replication == 1:
        lines.append("result: shown, not judged (replication 1 loses what its broker's disk held)")
    elif verdict.ok:
        lines.append("result: PASS (every count is zero)")
    elif verdict.acked_events == 0:
        lines.append("result: FAIL (no event was acknowledged: the agents did not run)")
    else:
        lines.append("result: FAIL")
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------
def run_faults(plan: Plan) -> tuple[Verdict, Faults, float, Run]:
    run = Run(plan)
    began = time.monotonic()
    threads: list[threading.Thread] = []
    agents: list[subprocess.Popen[bytes]] = []
    try:
        run.start_infrastructure()
        run.start_services()
        supervisor = threading.Thread(target=run.supervise, daemon=True)
        supervisor.start()
        deadline_at = time.time() + plan.duration_s
        agents = run.start_agents(deadline_at)
        if plan.replication > 1:
            for kind in SERVICE_COUNTS:
                threads.append(threading.Thread(target=run.kill_services, args=(kind,)))
            threads.append(threading.Thread(target=run.break_brokers))
            threads.append(
                threading.Thread(target=run.restart_postgres, args=(0.45 * plan.duration_s,))
            )
        for thread in threads:
            thread.daemon = True
            thread.start()
        _say(f"load and faults for {plan.duration_s:.0f}s ({plan.agents} agent processes)")
        if plan.replication == 1:
            _wipe_midway(run, plan)
        while time.time() < deadline_at:
            time.sleep(1)
        run.stop_faults.set()
        for thread in threads:
            thread.join(timeout=120)
        _say("faults stopped; healing the cluster and waiting for the agents")
        run.heal()
        for agent in agents:
            try:
                agent.wait(timeout=180)
            except subprocess.TimeoutExpired:
                agent.kill()
        _say("agents done; waiting for compensation and the archive to catch up")
        settle_until = time.monotonic() + plan.settle_s
        while True:
            try:
                done, why = run.settled()
            except Exception as exc:  # a read during recovery: try again
                done, why = False, f"{type(exc).__name__}: {exc}"
            if done or time.monotonic() > settle_until:
                _say(("settled" if done else "not settled in time") + f": {why}")
                break
            time.sleep(5)
        run.stop_supervisor.set()
        for service in run.services:
            service.stop()
        seen = observe(run)
        _write_unsettled(run.dir / "unsettled.txt", seen)
        verdict = check(seen)
        return verdict, run.faults, time.monotonic() - began, run
    finally:
        run.stop_faults.set()
        run.stop_supervisor.set()
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
        for service in run.services:
            with contextlib.suppress(Exception):
                service.kill()


def _write_unsettled(path: Path, seen: Observed) -> None:
    """Each saga whose compensation did not end, or ended for a person, event by event (for
    reading the logs)."""
    lines: list[str] = []
    for saga, read in sorted(seen.topic.items()):
        if not (_needs_compensation(read.entries) or _ended_for_a_person(read.entries)):
            continue
        lines.append(f"{saga} (partition {read.partition}): {seen.acks.get(saga, {})}")
        for entry, offset in zip(read.entries, read.offsets, strict=False):
            lines.append(
                f"  {offset:>7} seq {entry.seq:>3} {entry.event_type.value:<24} "
                f"{entry.tool or '':<10} {entry.actor or '':<50} {entry.result or ''}"
            )
        for rejected in read.rejected:
            lines.append(f"  rejected {rejected.offset} {rejected.kind.value}: {rejected.detail}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _wipe_midway(run: Run, plan: Plan) -> None:
    """Replication 1: kill -9 the one broker two thirds in, wipe its disk, start it again and
    recreate the topic (what an operator would do); everything on it before is gone."""
    time.sleep(plan.duration_s * 2 / 3)
    broker = run.kafka.single
    assert broker is not None
    state = broker.state()
    assert state is not None
    os.kill(state.pid, signal.SIGKILL)
    time.sleep(1)
    shutil.rmtree(broker.data_dir)
    run.faults.note("the broker killed and its disk wiped")
    run.faults.broker["wipe"] += 1
    broker.start()
    spec = TopicSpec(
        partitions=PARTITIONS, replication_factor=1, min_insync_replicas=1, retention_ms=DAY_MS
    )
    with contextlib.suppress(Exception):  # the writers may have recreated it already
        run._create_topic(spec)
    run.faults.note("the broker started on an empty disk; topic recreated")


def _write_doc(text: str, replication: int) -> None:
    start, end = MARKERS[replication]
    doc = DOC.read_text(encoding="utf-8")
    head, _, rest = doc.partition(start)
    _, _, tail = rest.partition(end)
    DOC.write_text(f"{head}{start}\n{text}\n{end}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="The short form for CI (~2 min).")
    parser.add_argument("--duration", type=float, default=None, help="Seconds of load+faults.")
    parser.add_argument("--agents", type=int, default=None, help="Agent processes.")
    parser.add_argument("--replication", type=int, choices=(1, 3), default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--home", type=Path, default=ROOT / ".sagacity" / "faults")
    parser.add_argument("--keep", action="store_true", help="Leave Kafka and Postgres running.")
    parser.add_argument("--write", action="store_true", help="Put the summary in the docs.")
    args = parser.parse_args(argv)
    quick = args.quick
    plan = Plan(
        duration_s=args.duration or (70.0 if quick else 600.0),
        agents=args.agents or (2 if quick else 3),
        service_kill_every_s=6.0 if quick else 9.0,
        broker_fault_every_s=12.0 if quick else 20.0,
        pace_s=0.2,
        settle_s=30.0 if args.replication == 1 else (120.0 if quick else 300.0),
        replication=args.replication,
        seed=args.seed if args.seed is not None else random.randrange(1 << 30),
        home=args.home.resolve(),
    )
    _say(f"fault run: {plan}")
    run: Run | None = None
    try:
        verdict, faults, elapsed, run = run_faults(plan)
    finally:
        if not args.keep:
            with contextlib.suppress(Exception):
                Kafka(plan.home, plan.replication).stop()
            with contextlib.suppress(Exception):
                PostgresServer(plan.home / "postgres").stop()
    text = table(verdict, faults, plan, elapsed)
    print(text)
    for example in verdict.examples:
        print("  e.g.", example)
    assert run is not None
    (run.dir / "summary.md").write_text(text + "\n", encoding="utf-8")
    (run.dir / "faults.log").write_text("\n".join(faults.log) + "\n", encoding="utf-8")
    print(f"run directory: {run.dir}")
    if args.write:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        _write_doc(
            f"Run of {stamp} on {platform.machine()} ({os.cpu_count()} cores, shared), "
            f"seed {plan.seed}, {plan.duration_s:.0f} s of load and faults, "
            f"{plan.agents} agent processes, replication {plan.replication}:\n\n{text}",
            plan.replication,
        )
    if plan.replication == 1:
        return 0  # losing events is what this run shows, not a failure
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
