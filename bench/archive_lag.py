"""Archive lag under a sustained load: events produced to Kafka at a fixed rate while the
archiver service runs; lag = archived_at (the batch transaction's start) - event time.

    python bench/archive_lag.py [--rate 1000] [--seconds 30] [--sagas 2000]

Needs SAGACITY_BOOTSTRAP_SERVERS and SAGACITY_DATABASE_URL (``sagacity dev up``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)

from sagacity import compose

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._archive_common import database_url, machine, scratch_schema, server_version, table
from sagacity.chain import link
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, now_micros
from sagacity.schemas import encode_entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1_000, help="events per second")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--sagas", type=int, default=2_000)
    args = parser.parse_args()
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise SystemExit("set SAGACITY_BOOTSTRAP_SERVERS (e.g. from `sagacity dev up`)")
    dsn = database_url()
    topic = f"bench.lag.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(30)
    total = args.rate * args.seconds
    try:
        with scratch_schema(dsn) as scoped:
            service = ArchiveService(
                ArchiveSettings(
                    bootstrap_servers=bootstrap,
                    database_url=scoped,
                    topic=topic,
                    group_id=f"bench-{uuid.uuid4().hex[:6]}",
                    poll_timeout=0.05,
                ),
                dependencies=compose.archive(),
            )
            runner = threading.Thread(target=service.run)
            runner.start()
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            heads = {f"saga-{n:06d}": (0, GENESIS_HASH) for n in range(args.sagas)}
            ids = list(heads)
            started = time.monotonic()
            for i in range(total):
                saga_id = ids[i % len(ids)]
                seq, prev = heads[saga_id]
                entry = link(
                    EntryDraft(
                        saga_id=saga_id,
                        event_type=EventType.SAGA_OPENED if seq == 0 else EventType.INTENT,
                        tool=None if seq == 0 else "refund_payment",
                        payload=None if seq == 0 else '{"order_id":"ord-1","amount_cents":1999}',
                        recorded_at_us=now_micros(),
                    ),
                    seq=seq + 1,
                    prev_hash=prev,
                )
                heads[saga_id] = (seq + 1, entry.hash)
                producer.produce(topic, key=saga_id.encode(), value=encode_entry(entry))
                producer.poll(0)
                ahead = (i + 1) / args.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            producer.flush(30)
            produced_in = time.monotonic() - started
            deadline = time.monotonic() + 120
            with psycopg.connect(scoped, autocommit=True) as conn:
                while time.monotonic() < deadline:
                    row = conn.execute("SELECT count(*) FROM side_effect_journal").fetchone()
                    if row and row[0] >= total:
                        break
                    time.sleep(0.2)
                service.stop()
                runner.join(30)
                lag = conn.execute(
                    "SELECT count(*),"
                    " percentile_cont(0.5) WITHIN GROUP (ORDER BY l),"
                    " percentile_cont(0.99) WITHIN GROUP (ORDER BY l), max(l)"
                    " FROM (SELECT (extract(epoch FROM archived_at) * 1e6 - recorded_at_us)"
                    " / 1000.0 AS l FROM side_effect_journal) x"
                ).fetchone()
    finally:
        admin.delete_topics([topic])
    assert lag is not None
    print(f"{machine()}; {server_version(dsn)}")
    print(
        f"{total:,} events over {args.sagas:,} sagas at {args.rate:,}/s target"
        f" ({total / produced_in:,.0f}/s achieved), 6 partitions\n"
    )
    print(
        table(
            [
                ("archived", "lag p50 (ms)", "lag p99 (ms)", "lag max (ms)"),
                (f"{lag[0]:,}", f"{lag[1]:.0f}", f"{lag[2]:.0f}", f"{lag[3]:.0f}"),
            ]
        )
    )


if __name__ == "__main__":
    main()
