"""Benchmark: sealing and opening a journal field against the journal's own cost per event.

Run ``python -m bench.envelope_bench`` (``--quick`` for a short run).  It needs
``SAGACITY_BOOTSTRAP_SERVERS`` and ``SAGACITY_DATABASE_URL`` (the data keys go to a schema of
its own, dropped at the end) and prints a table.

Measured in the same run, interleaved so load from elsewhere falls on both sides alike:
1. the journal's cost per event without encryption: a tool call's ``INTENT`` appended durably
   plus its ``EXECUTED`` pipelined, on a real topic, divided by two;
2. what encryption adds per event: one ``seal`` when the event is written and one ``open``
   when it is read, through the key service with the saga's key cached (its steady state);
3. the cost of a saga's first use of its key (created, wrapped and stored in Postgres), once
   per saga, and of a read that misses the cache (the wrapped key fetched and unwrapped).

The ratio (2) / (1) says how much of the journal's per-event budget encryption takes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import EntryDraft, EventType
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._envelope import KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KafkaJournal

PAYLOAD = b'{"order_id":"ord-0001","amount":"129.90","currency":"EUR","to":"acct-778812"}'
RESULT = b'{"charge_id":"ch_1M2n3","status":"succeeded"}'


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def _schema(database_url: str) -> Iterator[str]:
    """A conninfo on a fresh schema, dropped afterwards."""
    name = f"bench_keys_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(database_url)
    params["options"] = f"{params.get('options') or ''} -c search_path={name}".strip()
    try:
        yield make_conninfo(**params)  # type: ignore[arg-type]
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _journal_event(journal: KafkaJournal, saga: str) -> float:
    """Seconds per event of one tool call journaled (INTENT durable, EXECUTED pipelined)."""
    began = time.perf_counter()
    entry = journal.append(
        EntryDraft(
            saga_id=saga, event_type=EventType.INTENT, tool="charge", payload=PAYLOAD.decode()
        )
    )
    journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=EventType.EXECUTED,
            tool="charge",
            result=RESULT.decode(),
            attributes={"ref_seq": str(entry.seq)},
        ),
        durable=False,
    )
    return (time.perf_counter() - began) / 2


def _envelope_event(keys: KeyService, saga: str, seq: int, batch: int) -> float:
    """Seconds per event of a seal then an open, over ``batch`` events (cached key)."""
    began = time.perf_counter()
    for n in range(seq, seq + batch):
        field, value = ("payload", PAYLOAD) if n % 2 else ("result", RESULT)
        sealed = keys.seal(saga, n, field, value)
        keys.open(saga, n, field, sealed)
    return (time.perf_counter() - began) / batch


def run(
    bootstrap: str, database_url: str, *, calls: int, batch: int, sagas: int
) -> dict[str, float]:
    """One run: every figure of the table, in seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench.envelope.{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(30)
    with tempfile.TemporaryDirectory() as tmp, _schema(database_url) as conninfo:
        kek = write_key_encryption_key(Path(tmp) / "bench.kek")
        keys = KeyService(PostgresKeyStore(conninfo), KeyRing((kek,)))
        cold = KeyService(PostgresKeyStore(conninfo), KeyRing((kek,)), cache_ttl=0)
        journal = KafkaJournal(bootstrap, topic=topic)
        try:
            keys.check()
            saga = f"env-{uuid.uuid4().hex[:8]}"
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
            keys.seal(saga, 1, "payload", PAYLOAD)
            j_times: list[float] = []
            e_times: list[float] = []
            warm = max(10, calls // 10)
            for i in range(calls + warm):
                j = _journal_event(journal, saga)
                e = _envelope_event(keys, saga, 2 + i * batch, batch)
                if i >= warm:
                    j_times.append(j)
                    e_times.append(e)
            journal.flush()
            first: list[float] = []
            miss: list[float] = []
            for n in range(sagas):
                fresh = f"first-{n}-{uuid.uuid4().hex[:6]}"
                began = time.perf_counter()
                sealed = keys.seal(fresh, 1, "payload", PAYLOAD)
                first.append(time.perf_counter() - began)
                began = time.perf_counter()
                cold.open(fresh, 1, "payload", sealed)
                miss.append(time.perf_counter() - began)
        finally:
            journal.close()
            keys.close()
            cold.close()
            for future in admin.delete_topics([topic]).values():
                with contextlib.suppress(Exception):
                    future.result(30)
    return {
        "journal_p50": _pct(j_times, 0.5),
        "journal_mean": statistics.fmean(j_times),
        "envelope_p50": _pct(e_times, 0.5),
        "envelope_mean": statistics.fmean(e_times),
        "first_use_p50": _pct(first, 0.5),
        "cache_miss_p50": _pct(miss, 0.5),
    }


def _table(r: dict[str, float]) -> str:
    us = 1e6
    ratio = r["envelope_p50"] / r["journal_p50"]
    return "\n".join(
        [
            "| measure | µs per event (p50) | mean |",
            "| --- | ---: | ---: |",
            f"| journal, no encryption (INTENT acked + EXECUTED pipelined, / 2) "
            f"| {r['journal_p50'] * us:,.1f} | {r['journal_mean'] * us:,.1f} |",
            f"| seal + open, key cached (AES-256-GCM) "
            f"| {r['envelope_p50'] * us:,.1f} | {r['envelope_mean'] * us:,.1f} |",
            f"| **ratio** seal + open / journal | **{ratio:.4f}x** | |",
            f"| a saga's first seal (key created, wrapped, stored), once per saga "
            f"| {r['first_use_p50'] * us:,.1f} | |",
            f"| an open missing the cache (wrapped key read, unwrapped) "
            f"| {r['cache_miss_p50'] * us:,.1f} | |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="journaled tool calls")
    parser.add_argument("--batch", type=int, default=200, help="seal+open pairs per sample")
    parser.add_argument("--sagas", type=int, default=200, help="sagas for the first-use cost")
    parser.add_argument("--quick", action="store_true", help="a short run (CI, a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.batch, args.sagas = 100, 50, 20
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    database_url = os.environ.get("SAGACITY_DATABASE_URL")
    if not bootstrap or not database_url:
        print("set SAGACITY_BOOTSTRAP_SERVERS and SAGACITY_DATABASE_URL", file=sys.stderr)
        return 2
    result = run(bootstrap, database_url, calls=args.calls, batch=args.batch, sagas=args.sagas)
    print(_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
