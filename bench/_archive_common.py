"""Shared helpers for the archive benchmarks: synthetic chains, a scratch schema, a table."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity.chain import link
from sagacity.consumers.archive import RawEvent
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.postgres.archive import migrate
from sagacity.schemas import encode_entry

BASE_US = 1_780_000_000_000_000  # 2026-05-28


def entries(events: int, sagas: int, *, active: int = 1_000) -> Iterator[JournalEntry]:
    """``events`` entries over ``sagas`` sagas, ``active`` sagas interleaved at a time."""
    per_saga = max(events // sagas, 1)
    made = 0
    for group in range(0, sagas, active):
        ids = [f"saga-{n:08d}" for n in range(group, min(group + active, sagas))]
        prev = dict.fromkeys(ids, GENESIS_HASH)
        for seq in range(1, per_saga + 1):
            for saga_id in ids:
                if made >= events:
                    return
                # Calls: each INTENT (even seqs) then its EXECUTED (a story verify accepts).
                kind = EventType.EXECUTED if seq % 2 else EventType.INTENT
                draft = EntryDraft(
                    saga_id=saga_id,
                    event_type=EventType.SAGA_OPENED if seq == 1 else kind,
                    tool=None if seq == 1 else "refund_payment",
                    payload=None
                    if seq == 1
                    else json.dumps(
                        {"order_id": f"ord-{made}", "amount_cents": 1999, "currency": "EUR"},
                        separators=(",", ":"),
                    ),
                    result='{"refund_id":"re_123","status":"succeeded"}'
                    if kind is EventType.EXECUTED
                    else None,
                    actor="writer-7" if seq == 1 else None,
                    attributes={"ref_seq": str(seq - 1)} if kind is EventType.EXECUTED else {},
                    recorded_at_us=BASE_US + made,
                )
                entry = link(draft, seq=seq, prev_hash=prev[saga_id])
                prev[saga_id] = entry.hash
                made += 1
                yield entry


def raw_events(chain: list[JournalEntry], topic: str = "bench") -> list[RawEvent]:
    """Avro-encoded messages as the archiver would read them from Kafka."""
    return [
        RawEvent(topic=topic, partition=0, offset=i, key=e.saga_id.encode(), value=encode_entry(e))
        for i, e in enumerate(chain)
    ]


@contextlib.contextmanager
def scratch_schema(dsn: str) -> Iterator[str]:
    """A fresh schema holding a migrated archive; dropped afterwards. Yields its conninfo."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options') or ''} -c search_path={name}".strip()
    scoped = make_conninfo(**params)  # type: ignore[arg-type]
    try:
        with psycopg.connect(scoped, autocommit=True) as conn:
            migrate(conn)
        yield scoped
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def database_url() -> str:
    """The database to benchmark against (``SAGACITY_DATABASE_URL``)."""
    url = os.environ.get("SAGACITY_DATABASE_URL")
    if not url:
        raise SystemExit("set SAGACITY_DATABASE_URL (e.g. from `sagacity dev up`)")
    return url


def rss_mib() -> float:
    """This process's resident set size in MiB (Linux)."""
    with Path("/proc/self/status").open() as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> str:
    """One line describing where the run happened."""
    cpus = os.cpu_count()
    version = platform.python_version()
    with contextlib.suppress(OSError), Path("/proc/cpuinfo").open() as info:
        for line in info:
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {cpus} CPUs, Python {version}"
    return f"{platform.machine()}, {cpus} CPUs, Python {platform.python_version()}"


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def table(rows: list[tuple[str, ...]]) -> str:
    """A Markdown table (first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


class Timer:
    """``with Timer() as t: ...; t.seconds``."""

    def __enter__(self) -> Timer:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
