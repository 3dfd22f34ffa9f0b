"""Archive write throughput against a raw COPY of the same rows, in the same run.

    python bench/archive_throughput.py [--events 200000] [--sagas 20000] [--quick] [--batch 2000]

The archiver's figure covers its whole write path per batch: Avro decode and the hash check of
every event (in the compiled module where it is installed), then in one transaction the check
of every event against its saga's archived head, COPY of the rows, the head compare-and-set
and the offsets; the split between the two is shown.  The baseline COPYs the same rows,
already as tuples, into the same table (same indexes, partitions and defaults) in batches of
the same size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import psycopg

from sagacity.postgres.archive import PostgresArchiveIngest
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
    scratch_schema,
    server_version,
    table,
)
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.consumers.archive._ingest import (
    JOURNAL_COLUMNS,
    _journal_row,
    _native_archive_row,
)
from sagacity.entries._events import JournalEntry

_COPY_JOURNAL = f"COPY side_effect_journal ({', '.join(JOURNAL_COLUMNS)}) FROM STDIN"

NATIVE_CHECK = _native_archive_row() is not None


def raw_copy(
    dsn: str, chain: list[JournalEntry], tuples: list[tuple[object, ...]], batch: int
) -> float:
    """Seconds to COPY ``tuples`` into a fresh archive's journal, ``batch`` rows a transaction."""
    with scratch_schema(dsn) as scoped, psycopg.connect(scoped) as conn:
        conn.execute("SELECT sgc_ensure_month(%s)", (chain[0].recorded_at_us,))
        conn.execute("SELECT sgc_ensure_month(%s)", (chain[-1].recorded_at_us,))
        conn.commit()
        with Timer() as t:
            for i in range(0, len(tuples), batch):
                with conn.cursor().copy(_COPY_JOURNAL) as copy:
                    for row in tuples[i : i + batch]:
                        copy.write_row(row)
                conn.commit()
    return t.seconds


def archive(dsn: str, raw: list[RawEvent], batch: int) -> tuple[float, float]:
    """Seconds for the archiver to archive ``raw``: whole path, and its transactions only."""
    with scratch_schema(dsn) as scoped:
        archiver = BatchArchiver(
            PostgresArchiveIngest(scoped),
            consumer_group="bench",
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        check_seconds = 0.0
        with Timer() as t:
            for i in range(0, len(raw), batch):
                report = archiver.archive(raw[i : i + batch])
                assert report.archived == len(raw[i : i + batch])
                check_seconds += report.check_seconds
        archiver.close()
    return t.seconds, t.seconds - check_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--sagas", type=int, default=20_000)
    parser.add_argument(
        "--quick", action="store_true", help="50,000 events over 5,000 sagas (a shared machine)"
    )
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.events, args.sagas = 50_000, 5_000
    dsn = database_url()
    chain = list(entries(args.events, args.sagas))
    raw = raw_events(chain)
    tuples = [_journal_row(e, "bench", 0, i) for i, e in enumerate(chain)]
    copy_runs: list[float] = []
    archive_runs: list[float] = []
    write_runs: list[float] = []
    for _ in range(args.rounds):  # alternated: the machine may be shared
        copy_runs.append(raw_copy(dsn, chain, tuples, args.batch))
        whole, write = archive(dsn, raw, args.batch)
        archive_runs.append(whole)
        write_runs.append(write)
    copy_seconds = statistics.median(copy_runs)
    archive_seconds = statistics.median(archive_runs)
    write_seconds = statistics.median(write_runs)
    check_seconds = statistics.median(a - w for a, w in zip(archive_runs, write_runs, strict=True))
    n = len(chain)
    copy_rate, archive_rate = n / copy_seconds, n / archive_seconds
    print(f"{machine()}; {server_version(dsn)}")
    print(
        f"{n:,} events over {args.sagas:,} sagas, batches of {args.batch:,};"
        f" median of {args.rounds} alternated rounds\n"
    )
    print(
        table(
            [
                ("path", "seconds", "events/s", "vs raw COPY"),
                (
                    "raw COPY of the same rows",
                    f"{copy_seconds:.2f}",
                    f"{copy_rate:,.0f}",
                    "1.00x",
                ),
                (
                    "archiver, whole path (decode, hash, heads, COPY, offsets)",
                    f"{archive_seconds:.2f}",
                    f"{archive_rate:,.0f}",
                    f"{archive_rate / copy_rate:.2f}x",
                ),
                (
                    "archiver, database transaction only (heads, COPY, offsets)",
                    f"{write_seconds:.2f}",
                    f"{n / write_seconds:,.0f}",
                    f"{n / write_seconds / copy_rate:.2f}x",
                ),
                (
                    "of the whole path: decode, hash and check before the transaction"
                    f" ({'compiled' if NATIVE_CHECK else 'Python'})",
                    f"{check_seconds:.2f}",
                    f"{n / check_seconds:,.0f}",
                    f"{n / check_seconds / copy_rate:.2f}x",
                ),
            ]
        )
    )
    print(
        f"\nsplit of the whole path: {check_seconds / archive_seconds:.0%} decode, hash and"
        f" check; {write_seconds / archive_seconds:.0%} the transaction (of which classifying"
        " against the heads, the COPY, the heads' compare-and-set and the offsets)"
    )
    # The line a script reads (docs/performance.md): the whole path against its transaction.
    print(f"\ningest / its transaction: {write_seconds / archive_seconds:.2f}x")


if __name__ == "__main__":
    main()
