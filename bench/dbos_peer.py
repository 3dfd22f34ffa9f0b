"""A peer, side by side: one DBOS Transact durable step against one journaled Sagacity tool call.

    python bench/dbos_peer.py [--calls 1000] [--events 4000] [--rounds 3] [--quick]
        [--replication 3] [--dbos-database-url postgresql://…]

DBOS Transact (``pip install -e '.[bench]'``) is what a Python user would pick for durable,
journaled steps; here it keeps its state in the same PostgreSQL as the archive
(``SAGACITY_DATABASE_URL``, in a schema of its own, dropped afterwards).  Its tool call is a
workflow of one step: the workflow's start, the step's output and the workflow's end are
written to PostgreSQL before the call returns.  Sagacity's is the journal's (as
``bench/journal_bench.py`` measures it): the durable ``INTENT``, acknowledged by Kafka
(``SAGACITY_BOOTSTRAP_SERVERS``) before the tool may run, then the pipelined ``EXECUTED``.

Measured: sequential latency (p50, p99; the two interleaved call by call, so load elsewhere
falls on both), then tool calls per second with 1, 16 and 256 concurrent callers in one
process (asyncio; DBOS's async workflows and steps, the journal's ``append_async``),
alternating rounds, medians.  DBOS runs with its defaults (a pool of 20 connections to its
system database; ``--pool`` changes it), with asyncio's executor as wide as that pool.  The
last line printed is one line a script can read.

Durable against durable: ``--replication 3`` makes the journal's topic replicated three times
with ``min.insync.replicas=2`` (the journal produces with ``acks=all``: an event is acknowledged
once every in-sync replica holds it, and refused while fewer than two are in sync), on a cluster
such as ``sagacity dev up --brokers 3``;
``--dbos-database-url`` points DBOS at a PostgreSQL of its own (one with ``fsync`` and
``synchronous_commit`` on: the table prints both settings as the server reports them).
Target (issue 36): the journaled call at least 3x faster than a DBOS step at p50 and in calls
per second at 16 callers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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

from bench._runinfo import Stamp
from bench.journal_bench import PARTITIONS, PAYLOAD, RESULT, _executed, _intent, _pct
from sagacity import EntryDraft, EventType
from sagacity.producer import KafkaJournal

try:
    from dbos import DBOS, DBOSConfig
except ImportError:  # pragma: no cover - the bench extra is optional
    raise SystemExit("DBOS Transact is not installed: pip install -e '.[bench]'") from None


@DBOS.step()
def _charge(payload: str) -> str:
    return RESULT


@DBOS.workflow()
def dbos_tool_call(payload: str) -> str:
    """One durable step in a workflow: DBOS's unit of a journaled tool call."""
    return _charge(payload)


@DBOS.step()
async def _charge_async(payload: str) -> str:
    return RESULT


@DBOS.workflow()
async def dbos_tool_call_async(payload: str) -> str:
    return await _charge_async(payload)


def sagacity_tool_call(journal: KafkaJournal, saga: str) -> None:
    """One journaled tool call: the durable ``INTENT``, then the pipelined ``EXECUTED``."""
    entry = journal.append(_intent(saga))
    journal.append(_executed(saga, entry.seq), durable=False)


def latency(journal: KafkaJournal, calls: int, warmup: int) -> dict[str, float]:
    """Sequential p50/p99 in ms, DBOS and Sagacity interleaved call by call."""
    saga = f"peer-{uuid.uuid4().hex[:8]}"
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    d_times: list[float] = []
    s_times: list[float] = []
    for i in range(calls + warmup):
        began = time.perf_counter()
        assert dbos_tool_call(PAYLOAD) == RESULT
        d = time.perf_counter() - began
        began = time.perf_counter()
        sagacity_tool_call(journal, saga)
        s = time.perf_counter() - began
        if i >= warmup:
            d_times.append(d)
            s_times.append(s)
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED, result="OK"))
    return {
        "dbos_p50_ms": _pct(d_times, 0.5) * 1000,
        "dbos_p99_ms": _pct(d_times, 0.99) * 1000,
        "sagacity_p50_ms": _pct(s_times, 0.5) * 1000,
        "sagacity_p99_ms": _pct(s_times, 0.99) * 1000,
    }


async def _dbos_rate(callers: int, calls: int, pool: int) -> float:
    # DBOS's async calls do their database work through asyncio.to_thread: the default
    # executor (min(32, CPUs + 4) threads) would cap them below DBOS's own connection pool.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=pool))

    async def run() -> None:
        for _ in range(calls):
            await dbos_tool_call_async(PAYLOAD)

    began = time.perf_counter()
    await asyncio.gather(*(run() for _ in range(callers)))
    return callers * calls / (time.perf_counter() - began)


async def _sagacity_rate(journal: KafkaJournal, sagas: list[str], calls: int) -> float:
    async def run(saga: str) -> None:
        for _ in range(calls):
            entry = await journal.append_async(_intent(saga))
            await journal.append_async(_executed(saga, entry.seq), durable=False)

    began = time.perf_counter()
    await asyncio.gather(*(run(s) for s in sagas))
    await asyncio.get_running_loop().run_in_executor(None, journal.flush)
    return len(sagas) * calls / (time.perf_counter() - began)


def throughput(
    journal: KafkaJournal, callers: int, calls_total: int, rounds: int, minimum: int, pool: int
) -> dict[str, float]:
    """Tool calls per second with ``callers`` concurrent callers: medians of alternating
    rounds."""
    calls = max(minimum, calls_total // callers)
    d_rates: list[float] = []
    s_rates: list[float] = []
    for _ in range(rounds):
        d_rates.append(asyncio.run(_dbos_rate(callers, calls, pool)))
        sagas = [f"peer{callers}-{i}-{uuid.uuid4().hex[:6]}" for i in range(callers)]
        for saga in sagas:  # opening a saga is not a tool call
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
        s_rates.append(asyncio.run(_sagacity_rate(journal, sagas, calls)))
        for saga in sagas:
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED, result="OK"))
    return {"dbos": statistics.median(d_rates), "sagacity": statistics.median(s_rates)}


@contextlib.contextmanager
def _dbos(dsn: str, pool: int | None) -> Any:
    schema = f"dbos_peer_{uuid.uuid4().hex[:8]}"
    config: DBOSConfig = {
        "name": "sagacity-peer",
        "system_database_url": dsn,
        "dbos_system_schema": schema,
        "log_level": "WARNING",
    }
    if pool is not None:
        config["sys_db_pool_size"] = pool
    DBOS(config=config)
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


TARGET = 3.0
"""How many times faster than a DBOS step the journaled call must be (p50, calls/s at 16)."""


def _durability(dsn: str) -> str:
    """The server's ``fsync`` and ``synchronous_commit``, as it reports them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        fsync = conn.execute("SHOW fsync").fetchone()
        commit = conn.execute("SHOW synchronous_commit").fetchone()
    return (
        f"`fsync={fsync[0] if fsync else '?'}`, `synchronous_commit={commit[0] if commit else '?'}`"
    )


def _topic(admin: AdminClient, topic: str, replication: int) -> str:
    """Create the journal's topic; say how it is replicated."""
    isr = max(1, replication - 1)
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=PARTITIONS,
                replication_factor=replication,
                config={"min.insync.replicas": str(isr)},
            )
        ]
    )[topic].result(30)
    brokers = len(admin.list_topics(timeout=10).brokers)
    return (
        f"{brokers} broker(s), topic of {PARTITIONS} partitions, replication {replication}, "
        f"`min.insync.replicas={isr}`, `acks=all`"
    )


def _report(lat: dict[str, float], rates: dict[int, dict[str, float]]) -> list[str]:
    """The table, with each side's ratio and the targets met or not."""
    p50 = lat["dbos_p50_ms"] / lat["sagacity_p50_ms"]
    at16 = rates[16]["sagacity"] / rates[16]["dbos"]
    lines = [
        "| side | p50 ms | p99 ms | calls/s, 1 | calls/s, 16 | calls/s, 256 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in ("sagacity", "dbos"):
        lines.append(
            f"| {side} | {lat[f'{side}_p50_ms']:.2f} | {lat[f'{side}_p99_ms']:.2f} | "
            + " | ".join(f"{rates[n][side]:,.0f}" for n in (1, 16, 256))
            + " |"
        )
    ratios = " | ".join(f"{rates[n]['sagacity'] / rates[n]['dbos']:.1f}x" for n in (1, 16, 256))
    lines.append(
        "| sagacity's lead (dbos ms ÷ sagacity ms; sagacity calls/s ÷ dbos calls/s) | "
        f"{p50:.1f}x | {lat['dbos_p99_ms'] / lat['sagacity_p99_ms']:.1f}x | {ratios} |"
    )
    lines.append("")
    lines.append(
        f"Target: at least {TARGET:g}x at p50 ({p50:.1f}x: {'met' if p50 >= TARGET else 'missed'}) "
        f"and in calls per second at 16 callers ({at16:.1f}x: "
        f"{'met' if at16 >= TARGET else 'missed'})."
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per side")
    parser.add_argument("--events", type=int, default=4000, help="tool calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per figure")
    parser.add_argument("--pool", type=int, default=None, help="DBOS's connection pool size")
    parser.add_argument("--quick", action="store_true", help="a short run that proves it works")
    parser.add_argument(
        "--replication", type=int, default=1, help="the journal topic's replication factor"
    )
    parser.add_argument(
        "--dbos-database-url", default=None, help="DBOS's PostgreSQL (default: the archive's)"
    )
    args = parser.parse_args(argv)
    stamp = Stamp()
    if args.quick:
        args.calls, args.events, args.rounds = 100, 512, 1
    warmup, minimum = (10, 2) if args.quick else (50, 20)
    dsn = os.environ.get("SAGACITY_DATABASE_URL")
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    dsn = args.dbos_database_url or dsn
    if not dsn or not bootstrap:
        raise SystemExit("set SAGACITY_DATABASE_URL and SAGACITY_BOOTSTRAP_SERVERS")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench.peer.{uuid.uuid4().hex[:8]}"
    kafka = _topic(admin, topic, args.replication)
    database = _durability(dsn)
    journal = KafkaJournal(bootstrap, topic=topic)
    rates: dict[int, dict[str, float]] = {}
    try:
        with _dbos(dsn, args.pool):
            lat = latency(journal, args.calls, warmup)
            for callers in (1, 16, 256):
                rates[callers] = throughput(
                    journal, callers, args.events, args.rounds, minimum, args.pool or 20
                )
    finally:
        journal.close()
        with contextlib.suppress(Exception):
            admin.delete_topics([topic])[topic].result(30)
    print(stamp.line())
    print(f"Kafka: {kafka}. DBOS's PostgreSQL: {database}.")
    print(
        f"{args.calls} sequential calls per side; {args.rounds} round(s) of {args.events} "
        "calls per concurrency level."
    )
    print("\n".join(_report(lat, rates)))
    # The line a script reads.
    print(
        "dbos peer:"
        + "".join(f" {side}_p50_ms={lat[f'{side}_p50_ms']:.2f}" for side in ("sagacity", "dbos"))
        + "".join(f" {side}_p99_ms={lat[f'{side}_p99_ms']:.2f}" for side in ("sagacity", "dbos"))
        + "".join(
            f" {side}_calls_per_s_{n}={rates[n][side]:.0f}"
            for n in (1, 16, 256)
            for side in ("sagacity", "dbos")
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
