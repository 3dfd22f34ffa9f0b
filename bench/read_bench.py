"""Benchmark: reading a saga from a big partition, scanning it versus through the archive as
read index (docs/adr/0010-saga-read-index.md), and what that does to an approval decision.

Run ``python -m bench.read_bench``.  It uses ``SAGACITY_BOOTSTRAP_SERVERS`` /
``SAGACITY_DATABASE_URL`` when set, otherwise starts this checkout's local stack, prints a
table and writes it into ``docs/performance.md``.

Set-up: one topic of one partition holding ``--background`` journal events of other sagas
(sagas of 10 events) and ``--sagas`` sagas suspended at an approval gate, all archived by the
archiver's batch code into a fresh schema.  Measured, alternating the two sides saga by saga
in the same run: one ``SagaReader.read`` (a fresh saga each time) and one
``Sagacity.approve`` (the core's decision: read, verify, compare-and-append, read-back).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from sagacity.postgres.archive import PostgresArchiveIngest
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench._runinfo import Stamp
from bench.compensation_bench import _infrastructure, _machine, _pct
from sagacity import (
    DecisionSigner,
    EntryDraft,
    EventType,
    Reversibility,
    Sagacity,
    compensable,
)
from sagacity.chain import link
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.entries._events import GENESIS_HASH
from sagacity.postgres import PostgresSagaIndex
from sagacity.postgres.archive import migrate
from sagacity.producer import KafkaJournal, SagaReader
from sagacity.schemas import encode_entry

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "docs" / "performance.md"
START, END = "<!-- read-bench:start -->", "<!-- read-bench:end -->"
GROUP = "sagacity-archive"


class _Gate:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: int) -> str:
        return f"wired {amount}"


def _background(bootstrap: str, topic: str, events: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for start in range(0, events, 10):
        saga, prev = f"bg-{start // 10}", GENESIS_HASH
        for seq in range(1, min(10, events - start) + 1):
            draft = EntryDraft(
                saga_id=saga,
                event_type=EventType.SAGA_OPENED if seq == 1 else EventType.EXECUTED,
                tool=None if seq == 1 else "refund",
                result=None if seq == 1 else '{"refund":"r-1","amount":1250,"currency":"EUR"}',
            )
            entry = link(draft, seq=seq, prev_hash=prev)
            prev = entry.hash
            producer.produce(topic, key=saga.encode(), value=encode_entry(entry), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def _archive(bootstrap: str, topic: str, dsn: str) -> None:
    archiver = BatchArchiver(
        PostgresArchiveIngest(dsn),
        consumer_group=GROUP,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        position = 0
        while position < high:
            batch = [
                RawEvent(
                    topic=topic, partition=0, offset=m.offset() or 0, key=m.key(), value=m.value()
                )
                for m in consumer.consume(num_messages=2000, timeout=5)
                if m.error() is None
            ]
            if batch:
                archiver.archive(batch)
                position = batch[-1].offset + 1
    finally:
        consumer.close()
        archiver.close()


def _schema(dsn: str) -> str:
    schema = f"bench_read_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options') or ''} -c search_path={schema}".strip()
    scoped = make_conninfo(**params)
    with psycopg.connect(scoped, autocommit=True) as conn:
        migrate(conn)
    return scoped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--background", type=int, default=50_000)
    parser.add_argument("--sagas", type=int, default=60)
    parser.add_argument("--no-write", action="store_true", help="Do not update the docs.")
    args = parser.parse_args(argv)
    stamp = Stamp()
    with _infrastructure() as (bootstrap, root_dsn):
        topic = f"bench.read.{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
        dsn = _schema(root_dsn)
        _background(bootstrap, topic, args.background)
        writer = KafkaJournal(bootstrap, topic=topic)
        agent = Sagacity(writer, compensation="delegated")
        tools = agent.wrap(_Gate())
        gated: list[tuple[str, int]] = []
        for n in range(args.sagas):
            result = agent.saga(f"gate-{n}", functools.partial(tools.wire, n))
            if result.awaiting_seq is None:
                raise SystemExit(f"gate-{n} did not wait for an approval: {result.status}")
            gated.append((f"gate-{n}", result.awaiting_seq))
        writer.close()
        _archive(bootstrap, topic, dsn)
        config = {"bootstrap.servers": bootstrap}
        plain = SagaReader(config, topic, partitions=1)
        indexed = SagaReader(
            config, topic, partitions=1, index=PostgresSagaIndex(dsn, consumer_group=GROUP)
        )
        journals = {
            "scan": KafkaJournal(bootstrap, topic=topic),
            "index": KafkaJournal(
                bootstrap, topic=topic, index=PostgresSagaIndex(dsn, consumer_group=GROUP)
            ),
        }
        signer = DecisionSigner.ephemeral()
        reads: dict[str, list[float]] = {"scan": [], "index": []}
        consumed: dict[str, list[int]] = {"scan": [], "index": []}
        approvals: dict[str, list[float]] = {"scan": [], "index": []}
        try:
            for n, (saga, _) in enumerate(gated):
                for side, reader in (("scan", plain), ("index", indexed))[:: 1 if n % 2 else -1]:
                    before = reader.messages_read
                    t0 = time.perf_counter()
                    read = reader.read(saga)
                    reads[side].append((time.perf_counter() - t0) * 1000)
                    consumed[side].append(reader.messages_read - before)
                    assert read.source == side, read.index_fallback
            for n, (saga, seq) in enumerate(gated):
                side = "scan" if n % 2 else "index"
                # As the approvals service decides: signed (an unsigned approval on a shared
                # journal never counts, and the core refuses to journal one).
                deciding = Sagacity(
                    journals[side], compensation="delegated", decision_signer=signer
                )
                t0 = time.perf_counter()
                deciding.approve(saga, seq, "alice@example.com")
                approvals[side].append((time.perf_counter() - t0) * 1000)
        finally:
            plain.close()
            indexed.close()
            for journal in journals.values():
                journal.close()
    r_scan, r_index = _pct(reads["scan"], 0.5), _pct(reads["index"], 0.5)
    a_scan, a_index = _pct(approvals["scan"], 0.5), _pct(approvals["index"], 0.5)
    rows = [
        "| measure | partition scan | read index | ratio |",
        "| --- | ---: | ---: | ---: |",
        f"| one saga read, p50 (ms) | {r_scan:.1f} | {r_index:.1f} | {r_scan / r_index:.0f}x |",
        f"| Kafka messages consumed per read | {statistics.median(consumed['scan']):.0f} | "
        f"{statistics.median(consumed['index']):.0f} | |",
        f"| approve (core decision, signed), p50 (ms) | {a_scan:.1f} | {a_index:.1f} | "
        f"{a_scan / a_index:.0f}x |",
    ]
    section = "\n".join(
        [
            "## Reading a saga: partition scan versus read index (`python -m bench.read_bench`)",
            "",
            f"{stamp.line()} On {_machine()}; the local broker and PostgreSQL. One partition "
            f"holding {args.background} events of other sagas and {len(gated)} sagas at an "
            "approval gate, archived (the archiver caught up). Each side read each saga once "
            "(a fresh reader state per saga) and approved half of them, alternating sides; p50 "
            f"over {len(gated)} reads and {len(gated) // 2} approvals per side.",
            "",
            *rows,
            "",
            "A scan reads the partition from its start, so its cost grows with everything the "
            "topic retains; through the read index a read is one Postgres lookup plus the "
            "partition past the archiver's offset (here nothing). An approval reads the saga, "
            "re-reads it under the request's claim (continuing the first read) and appends "
            "with a read-back that also continues it: with continued reads the scan side "
            "pays one partition scan per decision, no longer three. Runs vary.",
        ]
    )
    print(section)
    if not args.no_write:
        text = PERF.read_text()
        block = f"{START}\n{section}\n{END}"
        if START in text and END in text:
            head, _, rest = text.partition(START)
            _, _, tail = rest.partition(END)
            text = head + block + tail
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        PERF.write_text(text)


if __name__ == "__main__":
    main()
