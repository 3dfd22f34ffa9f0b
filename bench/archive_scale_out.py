"""Archive throughput of one archive instance against two in one consumer group.

    python bench/archive_scale_out.py [--events 200000] [--sagas 20000] [--batch 2000]

The events are produced first to a 12-partition topic; then ``sagacity serve archive`` runs as
one process, or as two processes in one consumer group, on a fresh archive each time, until
every event is archived.  The rate is taken from the archive itself, the events over the span
between the first and the last batch's transaction (``archived_at``), so start-up and the
group's first assignment are not counted.  The last line is one a script reads:
``two instances / one: N.NNx``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._archive_common import (
    database_url,
    entries,
    machine,
    scratch_schema,
    server_version,
    table,
)
from sagacity.schemas import encode_entry

PARTITIONS = 12


def _produce(bootstrap: str, topic: str, events: int, sagas: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for entry in entries(events, sagas):
        producer.produce(topic, key=entry.saga_id.encode(), value=encode_entry(entry))
        producer.poll(0)
    assert producer.flush(60) == 0


def _serve(bootstrap: str, dsn: str, topic: str, group: str, batch: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sagacity.cli import main; main()",
            "serve",
            "archive",
            "--bootstrap-servers",
            bootstrap,
            "--database-url",
            dsn,
            "--topic",
            topic,
            "--group",
            group,
            "--batch-size",
            str(batch),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _one(conn: psycopg.Connection[Any], query: LiteralString) -> tuple[Any, ...]:
    """The one row of an aggregate ``query``."""
    row = conn.execute(query).fetchone()
    if row is None:
        raise SystemExit(f"no row from {query!r}")
    return tuple(row)


def run(bootstrap: str, dsn: str, topic: str, instances: int, events: int, batch: int) -> float:
    """Events per second archived by ``instances`` processes in one group, on a fresh archive."""
    with scratch_schema(dsn) as scoped:
        group = f"bench-{uuid.uuid4().hex[:8]}"
        procs = [_serve(bootstrap, scoped, topic, group, batch) for _ in range(instances)]
        try:
            with psycopg.connect(scoped, autocommit=True) as conn:
                deadline = time.monotonic() + 600
                while True:
                    (done,) = _one(conn, "SELECT count(*) FROM side_effect_journal")
                    if done >= events:
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"only {done:,} of {events:,} events archived in 600 s")
                    time.sleep(0.5)
                (span,) = _one(
                    conn,
                    "SELECT extract(epoch FROM max(archived_at) - min(archived_at))"
                    " FROM side_effect_journal",
                )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return events / max(float(span), 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--sagas", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()
    dsn = database_url()
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise SystemExit("set SAGACITY_BOOTSTRAP_SERVERS")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench.scaleout.{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[
        topic
    ].result(30)
    try:
        _produce(bootstrap, topic, args.events, args.sagas)
        one = run(bootstrap, dsn, topic, 1, args.events, args.batch)
        two = run(bootstrap, dsn, topic, 2, args.events, args.batch)
    finally:
        with contextlib.suppress(Exception):
            admin.delete_topics([topic])[topic].result(30)
    print(f"{machine()}; {server_version(dsn)}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"{args.events:,} events over {args.sagas:,} sagas on {PARTITIONS} partitions,"
        f" batches of {args.batch:,}\n"
    )
    print(
        table(
            [
                ("archive instances", "events/s", "vs one"),
                ("one", f"{one:,.0f}", "1.00x"),
                ("two, one consumer group", f"{two:,.0f}", f"{two / one:.2f}x"),
            ]
        )
    )
    print(f"\ntwo instances / one: {two / one:.2f}x")


if __name__ == "__main__":
    main()
