"""Archive verification rate against raw SHA-256 over the same bytes, in the same run.

    python bench/verify_rate.py [--events 200000] [--sagas 20000] [--quick]

The archive is filled, its heads signed, then ``sagacity verify --all``'s engine runs over
it.  The baseline hashes, with ``hashlib.sha256``, exactly the bytes a verifier must hash
(``prev_hash || canonical bytes`` of every entry), already in memory.

Two more rows give the database's own ceiling for any verifier that reads the archive: the
rows ``verify`` reads, streamed by ``COPY ... TO STDOUT`` and discarded unread by the client —
in chain order (saga, archive order), as a verifier walking chains needs them, and in no order.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
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
    scratch_schema,
    server_version,
    table,
)
from sagacity.chain import canonical_bytes
from sagacity.chain._fastverify import NATIVE, chain_verifier
from sagacity.consumers.archive import BatchArchiver, audit, generate_key, sign_pending
from sagacity.postgres.archive import ROW_COLUMNS, chain_rows, copy_blocks


def _copy_out_seconds(conn: psycopg.Connection, order: str, *, binary: bool = False) -> float:
    """Seconds for the server to stream every row ``verify`` reads (median of three)."""
    form = " (FORMAT BINARY)" if binary else ""
    query = f"COPY (SELECT {ROW_COLUMNS} FROM side_effect_journal {order}) TO STDOUT{form}"
    runs = []
    for _ in range(3):
        with Timer() as t, conn.cursor().copy(query) as copy:
            # Binary: read as chain_rows reads it (libpq directly, in blocks); text: psycopg's
            # iteration.
            for _block in copy_blocks(conn, copy, 65_536) if binary else copy:
                pass
        runs.append(t.seconds)
    conn.rollback()
    return statistics.median(runs)


def _bulk_check_seconds(conn: psycopg.Connection) -> tuple[float, int]:
    """Seconds for the chain check alone over a bulk read (binary COPY in chain order into
    the bulk verifier), and the sagas it passed (median of three)."""
    runs, passed = [], 0
    for _ in range(3):
        verifier = chain_verifier()
        with Timer() as t:
            verdicts = []
            for block in chain_rows(conn):
                verdicts += verifier.feed(block)
            verdicts += verifier.finish()
        runs.append(t.seconds)
        passed = sum(v.ok for v in verdicts)
    conn.rollback()
    return statistics.median(runs), passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--sagas", type=int, default=20_000)
    parser.add_argument(
        "--quick", action="store_true", help="50,000 events over 5,000 sagas (a shared machine)"
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.sagas = 50_000, 5_000
    dsn = database_url()
    chain = list(entries(args.events, args.sagas))
    inputs = [bytes.fromhex(e.prev_hash) + canonical_bytes(e, seq=e.seq) for e in chain]
    total_bytes = sum(map(len, inputs))

    def raw_sha() -> float:
        with Timer() as t:
            for data in inputs:
                hashlib.sha256(data).digest()
        return t.seconds

    before = raw_sha()
    with scratch_schema(dsn) as scoped, tempfile.TemporaryDirectory() as keys:
        archiver = BatchArchiver(
            PostgresArchiveIngest(scoped),
            consumer_group="bench",
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        raw = raw_events(chain)
        for i in range(0, len(raw), 2_000):
            archiver.archive(raw[i : i + 2_000])
        archiver.close()
        signer = generate_key(Path(keys) / "k.pem")
        with psycopg.connect(scoped) as conn:
            signed = sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
            verify_runs = []
            for _ in range(3):
                with Timer() as verify_time:
                    summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
                verify_runs.append(verify_time.seconds)
            verify_seconds = statistics.median(verify_runs)
            ordered = _copy_out_seconds(conn, 'ORDER BY saga_id COLLATE "C", archive_id')
            unordered = _copy_out_seconds(conn, "")
            ordered_binary = _copy_out_seconds(
                conn, 'ORDER BY saga_id COLLATE "C", archive_id', binary=True
            )
            bulk, bulk_passed = _bulk_check_seconds(conn)
    # The baseline before and after the verification, averaged: the machine may be shared.
    sha_seconds = (before + raw_sha()) / 2
    assert summary.ok == summary.sagas == args.sagas, summary.failures[:3]
    assert summary.events == len(chain)
    assert bulk_passed == args.sagas
    n = len(chain)
    sha_rate, verify_rate = n / sha_seconds, n / verify_seconds
    print(f"{machine()}; {server_version(dsn)}")
    print(
        f"{n:,} events over {args.sagas:,} sagas ({total_bytes / n:.0f} bytes hashed per event),"
        f" {signed:,} signed checkpoints\n"
    )
    print(
        table(
            [
                ("path", "seconds", "events/s", "vs raw SHA-256"),
                (
                    "raw SHA-256 of the same bytes (in memory)",
                    f"{sha_seconds:.2f}",
                    f"{sha_rate:,.0f}",
                    "1.00x",
                ),
                (
                    "verify --all (read, rebuild, hash, link, checkpoints)",
                    f"{verify_seconds:.2f}",
                    f"{verify_rate:,.0f}",
                    f"{verify_rate / sha_rate:.3f}x",
                ),
                (
                    "chain check only: binary COPY in chain order into the bulk verifier"
                    f" ({'compiled' if NATIVE else 'Python'}, as verify --all)",
                    f"{bulk:.2f}",
                    f"{n / bulk:,.0f}",
                    f"{n / bulk / sha_rate:.3f}x",
                ),
                *(
                    (
                        f"ceiling: the server streams verify's rows {how}, client discards",
                        f"{seconds:.2f}",
                        f"{n / seconds:,.0f}",
                        f"{n / seconds / sha_rate:.3f}x",
                    )
                    for how, seconds in (
                        ("in chain order", ordered),
                        ("in chain order, binary COPY", ordered_binary),
                        ("unordered", unordered),
                    )
                ),
            ]
        )
    )
    # The line a script reads (docs/performance.md): verify against the in-order ceiling.
    print(f"\nverify / in-order ceiling: {verify_rate / (n / ordered):.2f}x")


if __name__ == "__main__":
    main()
