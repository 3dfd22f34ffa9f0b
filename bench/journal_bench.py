"""Benchmark: the Kafka journal against raw confluent-kafka on the same broker, same run.

Run ``python -m bench.journal_bench`` (or ``python bench/journal_bench.py``).  It uses
``SAGACITY_BOOTSTRAP_SERVERS`` when set, otherwise starts this checkout's local stack (and
stops it again), prints a table and writes it into ``docs/performance.md``.

Measured:
1. Journaling cost of one tool call: ``INTENT`` appended durably (the tool may not run before
   the broker acknowledges it) plus ``EXECUTED`` pipelined, on a saga the journal owns —
   against one raw acknowledged produce of the same ``INTENT`` bytes followed by an
   unacknowledged produce of the same ``EXECUTED`` bytes, with the same producer settings.
2. Events per second with 1, 16 and 256 concurrent sagas in one process (asyncio), against
   the raw producer driven the same way (each saga: produce ``INTENT``, await its ack, produce
   ``EXECUTED``).

Both are measured for the journal in clear and for a second journal sealing its data under
per-saga keys (chain form 2, docs/adr/0019-erasure.md), side by side in the same run: the key
store is the database at ``SAGACITY_DATABASE_URL`` when set, else in memory (keys are made at
saga opening, which is not timed; the timed calls use the key service's cache either way).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import confluent_kafka
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)

from bench._profile import profile
from bench._runinfo import Stamp
from sagacity import EntryDraft, EventType
from sagacity.chain import link
from sagacity.keys import KeyRing, KeyService, write_key_encryption_key
from sagacity.ports import KeyStore
from sagacity.producer import KafkaJournal, partition_for
from sagacity.schemas import current_schema, encode_entry
from sagacity.schemas._hotpath import NATIVE, link_encoded
from sagacity.tools._codec import check_json_payload

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "docs" / "performance.md"
START, END = "<!-- journal-bench:start -->", "<!-- journal-bench:end -->"
PARTITIONS = 12
MIN_CALLS = 40
PAYLOAD = '{"order_id":"ord-0001","amount":"129.90","currency":"EUR","to":"acct-778812"}'
RESULT = '{"charge_id":"ch_1M2n3","status":"succeeded"}'


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _intent(saga: str) -> EntryDraft:
    return EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="charge", payload=PAYLOAD)


def _executed(saga: str, ref_seq: int) -> EntryDraft:
    return EntryDraft(
        saga_id=saga,
        event_type=EventType.EXECUTED,
        tool="charge",
        result=RESULT,
        attributes={"ref_seq": str(ref_seq)},
    )


def _sample_bytes(saga: str) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    first = link(_intent(saga), seq=2, prev_hash="ab" * 32)
    second = link(_executed(saga, 2), seq=3, prev_hash=first.hash)
    headers = [
        ("event_type", b"INTENT"),
        ("saga_id", saga.encode()),
        ("schema_fingerprint", current_schema().fingerprint.hex().encode()),
    ]
    return encode_entry(first), encode_entry(second), headers


class Raw:
    """The baseline: a bare confluent-kafka producer with the journal's durability settings."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "partitioner": "murmur2_random",
            }
        )
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)

    def call(
        self, key: bytes, partition: int, intent: bytes, executed: bytes, headers: Any
    ) -> None:
        done = threading.Event()
        errors: list[Any] = []

        def ack(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)
            done.set()

        self.producer.produce(
            self.topic, value=intent, key=key, partition=partition, headers=headers, on_delivery=ack
        )
        if not done.wait(30) or errors:
            raise RuntimeError(f"raw produce failed: {errors}")
        self.producer.produce(
            self.topic, value=executed, key=key, partition=partition, headers=headers
        )

    async def call_async(
        self, key: bytes, partition: int, intent: bytes, executed: bytes, headers: Any
    ) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(err: Any) -> None:
            if not future.done():
                future.set_result(err)

        def ack(err: Any, _msg: Any) -> None:
            loop.call_soon_threadsafe(settle, err)

        self.producer.produce(
            self.topic, value=intent, key=key, partition=partition, headers=headers, on_delivery=ack
        )
        err = await asyncio.wait_for(future, 30)
        if err is not None:
            raise RuntimeError(f"raw produce failed: {err}")
        self.producer.produce(
            self.topic, value=executed, key=key, partition=partition, headers=headers
        )

    def close(self) -> None:
        self.producer.flush(30)
        self._stop.set()
        self._poller.join()


def latency(journal: KafkaJournal, raw: Raw, calls: int, sealed: KafkaJournal) -> dict[str, float]:
    """Per-call journaling cost, in clear and sealed, vs one raw acknowledged produce;
    interleaved call by call to share noise."""
    saga = f"lat-{uuid.uuid4().hex[:8]}"
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    sealed.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    raw_key = f"raw-{uuid.uuid4().hex[:8]}".encode()
    raw_partition = partition_for(raw_key, PARTITIONS)
    intent_bytes, executed_bytes, headers = _sample_bytes(saga)
    j_times: list[float] = []
    s_times: list[float] = []
    r_times: list[float] = []
    for i in range(calls + 50):
        began = time.perf_counter()
        entry = journal.append(_intent(saga))
        journal.append(_executed(saga, entry.seq), durable=False)
        j = time.perf_counter() - began
        began = time.perf_counter()
        entry = sealed.append(_intent(saga))
        sealed.append(_executed(saga, entry.seq), durable=False)
        sj = time.perf_counter() - began
        began = time.perf_counter()
        raw.call(raw_key, raw_partition, intent_bytes, executed_bytes, headers)
        r = time.perf_counter() - began
        if i >= 50:  # warm-up
            j_times.append(j)
            s_times.append(sj)
            r_times.append(r)
    journal.flush()
    sealed.flush()
    return {
        "calls": calls,
        "journal_p50_ms": _pct(j_times, 0.5) * 1000,
        "journal_p99_ms": _pct(j_times, 0.99) * 1000,
        "sealed_p50_ms": _pct(s_times, 0.5) * 1000,
        "sealed_p99_ms": _pct(s_times, 0.99) * 1000,
        "raw_p50_ms": _pct(r_times, 0.5) * 1000,
        "raw_p99_ms": _pct(r_times, 0.99) * 1000,
        "journal_mean_ms": statistics.fmean(j_times) * 1000,
        "raw_mean_ms": statistics.fmean(r_times) * 1000,
    }


async def _journal_throughput(journal: KafkaJournal, sagas: list[str], calls: int) -> float:
    async def run(saga: str) -> None:
        for _ in range(calls):
            entry = await journal.append_async(_intent(saga))
            await journal.append_async(_executed(saga, entry.seq), durable=False)

    began = time.perf_counter()
    await asyncio.gather(*(run(s) for s in sagas))
    await asyncio.get_running_loop().run_in_executor(None, journal.flush)
    return time.perf_counter() - began


async def _raw_throughput(raw: Raw, sagas: list[str], calls: int) -> float:
    prepared = []
    for saga in sagas:
        key = saga.encode()
        intent_bytes, executed_bytes, headers = _sample_bytes(saga)
        prepared.append(
            (key, partition_for(key, PARTITIONS), intent_bytes, executed_bytes, headers)
        )

    async def run(item: tuple[Any, ...]) -> None:
        for _ in range(calls):
            await raw.call_async(*item)

    began = time.perf_counter()
    await asyncio.gather(*(run(p) for p in prepared))
    await asyncio.get_running_loop().run_in_executor(None, raw.producer.flush, 30)
    return time.perf_counter() - began


def throughput(
    journal: KafkaJournal,
    raw: Raw,
    concurrency: int,
    events: int,
    rounds: int,
    sealed: KafkaJournal,
) -> dict[str, float]:
    """Events/s with ``concurrency`` sagas in one process, journal (in clear and sealed) vs raw.

    The three runs alternate for ``rounds`` rounds and the median of each is reported, so that
    load from elsewhere on the machine falls on every side alike.
    """
    # At least MIN_CALLS calls per saga: with a handful each, a round is mostly the ramp-up
    # (every saga's first produce at once) and the tail (the last sagas finishing alone).
    calls = max(MIN_CALLS, events // (2 * concurrency))
    total = 2 * calls * concurrency
    j_rates: list[float] = []
    s_rates: list[float] = []
    r_rates: list[float] = []
    j_cpu: list[float] = []
    s_cpu: list[float] = []
    r_cpu: list[float] = []
    for _ in range(rounds):
        sagas = [f"tp{concurrency}-{i}-{uuid.uuid4().hex[:6]}" for i in range(concurrency)]
        for saga in sagas:  # opening is not part of the steady state measured
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
            sealed.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
        raw_sagas = [f"raw{concurrency}-{i}-{uuid.uuid4().hex[:6]}" for i in range(concurrency)]
        cpu = time.thread_time()
        j_rates.append(total / asyncio.run(_journal_throughput(journal, sagas, calls)))
        j_cpu.append((time.thread_time() - cpu) / total)
        cpu = time.thread_time()
        s_rates.append(total / asyncio.run(_journal_throughput(sealed, sagas, calls)))
        s_cpu.append((time.thread_time() - cpu) / total)
        cpu = time.thread_time()
        r_rates.append(total / asyncio.run(_raw_throughput(raw, raw_sagas, calls)))
        r_cpu.append((time.thread_time() - cpu) / total)
        for saga in sagas:  # nor is ending: an agent ends its sagas, and the journal forgets them
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED, result="OK"))
            sealed.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED, result="OK"))
    return {
        "sagas": concurrency,
        "events": total,
        "journal_eps": statistics.median(j_rates),
        "sealed_eps": statistics.median(s_rates),
        "sealed_cpu_us": statistics.median(s_cpu) * 1e6,
        "raw_eps": statistics.median(r_rates),
        "journal_cpu_us": statistics.median(j_cpu) * 1e6,
        "raw_cpu_us": statistics.median(r_cpu) * 1e6,
    }


def own_work(calls: int = 20_000) -> float:
    """µs per event of what the journal must do that a raw produce of ready bytes does not,
    without Kafka, in a tight loop (a lower bound: warm caches, no tracking or asyncio): make
    both drafts, check the payload is JSON, link, hash and Avro-encode both events."""
    saga = f"own-{uuid.uuid4().hex[:6]}"
    prev = "ab" * 32
    began = time.perf_counter()
    for seq in range(2, 2 * calls + 2, 2):
        intent = _intent(saga)
        check_json_payload(intent)
        entry, _ = link_encoded(intent, seq=seq, prev_hash=prev)
        entry, _ = link_encoded(_executed(saga, seq), seq=seq + 1, prev_hash=entry.hash)
        prev = entry.hash
    return (time.perf_counter() - began) / (2 * calls) * 1e6


def _row(
    label: str,
    journal: list[float],
    raw: list[float],
    ratios: list[float],
    fmt: str,
    target: str,
    ok: bool,
) -> str:
    spread = f" ({ratios[0]:.2f} to {ratios[-1]:.2f})" if len(ratios) > 1 else ""
    return (
        f"| {label} | {statistics.median(journal):{fmt}} | {statistics.median(raw):{fmt}} "
        f"| {statistics.median(ratios):.2f}x{spread} | {target} {'✓' if ok else '✗'} |"
    )


def _targets(side: str, measure: str) -> tuple[str, Any]:
    """The target of one row (issue 36: on the median of the runs and on every run) and its
    check over the runs' sorted ratios."""
    if measure == "p50":
        return "≤ 1.15x, every run", lambda r: r[-1] <= 1.15
    if measure == "p99":
        return "≤ 1.3x, every run", lambda r: r[-1] <= 1.3
    if measure == "256":
        floor = 0.8 if side == "journal" else 0.6
        return (
            f"≥ {floor}x, no run < 0.5x",
            lambda r: statistics.median(r) >= floor and r[0] >= 0.5,
        )
    return "≥ 0.5x", lambda r: statistics.median(r) >= 0.5


def _table(lats: list[dict[str, float]], tps: list[list[dict[str, float]]]) -> str:
    """One row per measure and side (in clear, sealed): medians over the runs, the median
    ratio against raw and its range."""
    lines = [
        "| measure | journal | raw confluent-kafka | ratio (range over runs) | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for side, label in (("journal", ""), ("sealed", "sealed: ")):
        for q in ("p50", "p99"):
            ratios = sorted(r[f"{side}_{q}_ms"] / r[f"raw_{q}_ms"] for r in lats)
            target, check = _targets(side, q)
            lines.append(
                _row(
                    f"{label}one tool call, {q} (ms)",
                    [r[f"{side}_{q}_ms"] for r in lats],
                    [r[f"raw_{q}_ms"] for r in lats],
                    ratios,
                    ".2f",
                    target,
                    check(ratios),
                )
            )
        for level in zip(*tps, strict=True):
            ratios = sorted(r[f"{side}_eps"] / r["raw_eps"] for r in level)
            sagas = int(level[0]["sagas"])
            target, check = _targets(side, str(sagas))
            lines.append(
                _row(
                    f"{label}events/s, {sagas} concurrent saga(s)",
                    [r[f"{side}_eps"] for r in level],
                    [r["raw_eps"] for r in level],
                    ratios,
                    ",.0f",
                    target,
                    check(ratios),
                )
            )
    return "\n".join(lines)


def _machine() -> str:
    return (
        f"{platform.node()}: {platform.system()} {platform.release()}, {os.cpu_count()} CPU(s) "
        f"({platform.machine()}), Python {platform.python_version()}, confluent-kafka "
        f"{metadata.version('confluent-kafka')} / librdkafka {confluent_kafka.libversion()[0]}"
    )


def _write(section: str) -> None:
    text = PERF.read_text("utf-8") if PERF.exists() else "# Performance\n\nMeasured figures.\n"
    block = f"{START}\n{section}\n{END}"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    PERF.parent.mkdir(parents=True, exist_ok=True)
    PERF.write_text(text, "utf-8")


@contextlib.contextmanager
def _key_service(scratch: Path) -> Any:
    """A key service with a fresh key-encryption key, its store in the database at
    ``SAGACITY_DATABASE_URL`` (in a schema of its own, dropped after) or else in memory."""
    kek = write_key_encryption_key(scratch / "bench.kek")
    url = os.environ.get("SAGACITY_DATABASE_URL")
    if not url:
        from sagacity.testing import InMemoryKeyStore

        yield KeyService(InMemoryKeyStore(), KeyRing((kek,))), "in memory"
        return
    import psycopg

    from sagacity.postgres import PostgresKeyStore

    schema = f"bench_keys_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    store: KeyStore = PostgresKeyStore(
        f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    )
    keys = KeyService(store, KeyRing((kek,)))
    try:
        yield keys, "in PostgreSQL (SAGACITY_DATABASE_URL)"
    finally:
        keys.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def _broker() -> Any:
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield bootstrap, "the broker at SAGACITY_BOOTSTRAP_SERVERS"
        return
    from sagacity.dev import Stack

    stack = Stack()
    endpoints = stack.up(kafka=True, postgres=False)
    try:
        assert endpoints.bootstrap_servers is not None
        yield endpoints.bootstrap_servers, "this checkout's local stack (one KRaft broker)"
    finally:
        if "kafka" in endpoints.started:
            stack.down(kafka=True, postgres=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="tool calls per latency run")
    parser.add_argument("--events", type=int, default=6000, help="events per throughput round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per figure")
    parser.add_argument("--runs", type=int, default=3, help="whole runs (medians are reported)")
    parser.add_argument("--no-write", action="store_true", help="do not update performance.md")
    parser.add_argument(
        "--quick", action="store_true", help="a short run that proves it works (not written)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of the bench: cProfile of the tool call and of 256 sagas, clear and sealed",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.events, args.rounds, args.runs, args.no_write = 200, 1000, 1, 1, True
    stamp = Stamp()
    lats: list[dict[str, float]] = []
    tps: list[list[dict[str, float]]] = []
    owns: list[float] = []
    with (
        _broker() as (bootstrap, where),
        tempfile.TemporaryDirectory() as scratch,
        _key_service(Path(scratch)) as (keys, key_store),
    ):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [
            f"bench.journal.{uuid.uuid4().hex[:8]}",
            f"bench.raw.{uuid.uuid4().hex[:8]}",
            f"bench.sealed.{uuid.uuid4().hex[:8]}",
        ]
        for future in admin.create_topics(
            [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in topics]
        ).values():
            future.result(30)
        journal = KafkaJournal(bootstrap, topic=topics[0])
        raw = Raw(bootstrap, topics[1])
        sealed = KafkaJournal(bootstrap, topic=topics[2], keys=keys)
        try:
            if args.profile:
                profile(journal, sealed, args.calls, _intent, _executed)
                return 0
            for _ in range(args.runs):
                lats.append(latency(journal, raw, args.calls, sealed))
                tps.append(
                    [
                        throughput(journal, raw, n, args.events, args.rounds, sealed)
                        for n in (1, 16, 256)
                    ]
                )
                owns.append(own_work())
        finally:
            journal.close()
            sealed.close()
            raw.close()
            for future in admin.delete_topics(topics).values():
                with contextlib.suppress(Exception):
                    future.result(30)
    table = _table(lats, tps)
    journal_p50 = statistics.median(r["journal_p50_ms"] for r in lats)
    raw_p50 = statistics.median(r["raw_p50_ms"] for r in lats)
    overhead = journal_p50 - raw_p50
    p50_ratio = statistics.median(r["journal_p50_ms"] / r["raw_p50_ms"] for r in lats)
    crowded = statistics.median(run[-1]["journal_eps"] / run[-1]["raw_eps"] for run in tps)
    sealed_p50 = statistics.median(r["sealed_p50_ms"] / r["raw_p50_ms"] for r in lats)
    sealed_crowded = statistics.median(run[-1]["sealed_eps"] / run[-1]["raw_eps"] for run in tps)
    s_cpu = statistics.median(run[-1]["sealed_cpu_us"] for run in tps)
    own = statistics.median(owns)
    j_cpu = statistics.median(run[-1]["journal_cpu_us"] for run in tps)
    r_cpu = statistics.median(run[-1]["raw_cpu_us"] for run in tps)
    # The journal's calling thread does at least the raw loop's work plus its own per event.
    ceiling = statistics.median(
        1 / ((run[-1]["raw_cpu_us"] + own) * 1e-6 * run[-1]["raw_eps"]) for run in tps
    )
    latency_reading = (
        f"that is within the 1.15x target here (median {p50_ratio:.2f}x)"
        if p50_ratio <= 1.15
        else f"that misses the 1.15x target here (median {p50_ratio:.2f}x)"
    )
    crowd_reading = (
        f"at 256 sagas the journal keeps {crowded:.2f}x of the raw rate (target 0.8x: met)"
        if crowded >= 0.8
        else f"at 256 sagas the journal keeps {crowded:.2f}x of the raw rate (target 0.8x: missed)"
    )
    hot_path = (
        "compiled (`native/`, docs/adr/0013-compiled-hot-path.md)"
        if NATIVE
        else "in Python (`native/` not installed, or `SAGACITY_NATIVE=0`)"
    )
    section = (
        "## Journal on Kafka (`python -m bench.journal_bench`)\n\n"
        f"{stamp.line()} On {_machine()}; broker: {where}, topics of {PARTITIONS} partitions, "
        "replication factor 1. Producer for both sides: idempotent, `acks=all`, `linger.ms=0`. "
        f"The journal's link-and-encode step: {hot_path}.\n"
        f"{args.runs} whole runs; each figure is the median over the runs, each ratio the median "
        "of the runs' ratios with their range. "
        f"Latency: {args.calls} tool calls per run on one owned saga, journal and raw interleaved "
        "call by call. A tool call's journaling is the durable `INTENT` (acknowledged before the "
        "tool may run) plus the pipelined `EXECUTED`, both built from drafts inside the timed "
        "call; the raw side produces the same bytes, already encoded, and waits for the first "
        "acknowledgement only. Throughput: asyncio, each saga loops (durable `INTENT`, "
        "pipelined `EXECUTED`); the raw side does the same with bare produce calls; "
        f"{args.rounds} alternating rounds of {args.events} events per figure and run (at least "
        f"{MIN_CALLS} tool calls per saga: {2 * MIN_CALLS * 256} events at 256 sagas). Saga "
        "opening (a partition read, a produce, a read-back) and ending (`SAGA_ENDED`, after "
        "which the journal holds nothing of the saga) are excluded. The `sealed:` rows are a "
        "second journal, on its own topic, sealing its data under per-saga keys (chain form 2, "
        f"docs/adr/0019-erasure.md; the key store {key_store}), run in turn with the other two "
        "in every round and latency loop.\n\n"
        f"{table}\n\n"
        "Reading the figures. The journal's tool call costs one acknowledged produce (the "
        "durable `INTENT`) plus CPU on the calling thread: building and validating two drafts, "
        "checking the payload is JSON, hashing and Avro-encoding both events in one pass, and "
        f"tracking their acknowledgements — here {overhead:.2f} ms per call at p50 against a "
        f"localhost acknowledgement of {raw_p50:.2f} ms; {latency_reading}. Over a network, or "
        "with replication to other brokers, the acknowledgement grows and the same CPU weighs "
        "less. With many concurrent sagas in one process the raw producer is bound by the "
        "broker and the journal by its per-event Python work under the GIL (which the producer "
        f"thread's delivery callbacks share): {crowd_reading}. Calling-thread CPU per event at "
        f"256 sagas: journal {j_cpu:.1f} µs, raw {r_cpu:.1f} µs. What the journal must do that "
        "a produce of ready bytes does not (both drafts, the JSON check, the canonical form, "
        "SHA-256 and Avro for both events) costs "
        f"{own:.1f} µs per event in a tight loop without Kafka (`own_work`, a lower bound); "
        "added to the raw loop's CPU per event, it alone caps the journal at "
        f"{ceiling:.2f}x of the raw rate at 256 sagas, before any acknowledgement tracking, "
        "asyncio future or second delivery callback. The machine is shared (its load "
        "is given above), so runs vary; the range column shows by how much.\n\n"
        f"Sealed, the tool call's p50 is {sealed_p50:.2f}x of the raw produce and 256 sagas keep "
        f"{sealed_crowded:.2f}x of the raw rate (targets 1.15x and 0.6x: "
        f"{'met' if sealed_p50 <= 1.15 else 'missed'} and "
        f"{'met' if sealed_crowded >= 0.6 else 'missed'}); calling-thread CPU per event at 256 "
        f"sagas {s_cpu:.1f} µs against {j_cpu:.1f} µs in clear. Sealing adds, per event, the "
        "form-2 commitments (a salt and a SHA-256 per data field) and one AES-256-GCM per data "
        "field (docs/adr/0019-erasure.md, Consequences)."
    )
    print(section)
    if not args.no_write:
        _write(section)
        print(f"written to {PERF.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
