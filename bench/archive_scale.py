"""Scale run: N events over S sagas archived, signed and verified; the archiver's memory.

    python bench/archive_scale.py [--events 1000000] [--sagas 100000] [--batch 2000]

Events are generated batch by batch (about ten per saga, a thousand sagas interleaved at a
time) and fed to the archiver's write path; the process's resident memory is sampled as the
number of archived sagas grows.  Then every head is signed and the whole archive verified.
Not part of the test suite: the full size takes minutes.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import psycopg

from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._archive_common import (
    Timer,
    database_url,
    entries,
    machine,
    raw_events,
    rss_mib,
    scratch_schema,
    server_version,
    table,
)
from sagacity.consumers.archive import BatchArchiver, audit, generate_key, sign_pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sagas", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()
    dsn = database_url()
    samples: list[tuple[str, ...]] = [("events archived", "sagas archived", "archiver RSS (MiB)")]
    step = max(args.events // 10, args.batch)
    archive_seconds = 0.0
    with scratch_schema(dsn) as scoped, tempfile.TemporaryDirectory() as keys:
        archiver = BatchArchiver(
            PostgresArchiveIngest(scoped),
            consumer_group="bench",
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        stream = entries(args.events, args.sagas)
        done, offset, next_sample = 0, 0, step
        while True:
            chunk = list(itertools.islice(stream, args.batch))
            if not chunk:
                break
            raw = raw_events(chunk)
            raw = [
                r.__class__(topic=r.topic, partition=0, offset=offset + i, key=r.key, value=r.value)
                for i, r in enumerate(raw)
            ]
            offset += len(raw)
            with Timer() as t:
                report = archiver.archive(raw)
            archive_seconds += t.seconds
            assert report.archived == len(raw), report
            done += len(raw)
            if done >= next_sample or done == args.events:
                with psycopg.connect(scoped) as conn:
                    row = conn.execute("SELECT count(*) FROM archive_saga_head").fetchone()
                samples.append((f"{done:,}", f"{row[0] if row else 0:,}", f"{rss_mib():.1f}"))
                next_sample += step
        archiver.close()
        signer = generate_key(Path(keys) / "k.pem")
        with psycopg.connect(scoped) as conn:
            with Timer() as sign_time:
                signed = sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
            with Timer() as verify_time:
                summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
            size = conn.execute(
                "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_inherits i"
                " JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'side_effect_journal'::regclass"
            ).fetchone()
    assert summary.sagas == summary.ok == args.sagas, summary.failures[:3]
    assert summary.events == args.events
    print(f"{machine()}; {server_version(dsn)}")
    print(
        f"{args.events:,} events over {args.sagas:,} sagas, batches of {args.batch:,};"
        f" journal size {size[0] if size else '?'}\n"
    )
    print(
        table(
            [
                ("step", "seconds", "rate"),
                (
                    "archive (decode, chain check, COPY, heads, offsets)",
                    f"{archive_seconds:.1f}",
                    f"{args.events / archive_seconds:,.0f} events/s",
                ),
                (
                    "sign every head (Ed25519)",
                    f"{sign_time.seconds:.1f}",
                    f"{signed / sign_time.seconds:,.0f} heads/s",
                ),
                (
                    "verify --all (chains and checkpoints)",
                    f"{verify_time.seconds:.1f}",
                    f"{args.events / verify_time.seconds:,.0f} events/s",
                ),
            ]
        )
    )
    print()
    print(table(samples))


if __name__ == "__main__":
    main()
