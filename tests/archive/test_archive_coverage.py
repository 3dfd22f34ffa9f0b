"""What ``verify`` says about rows the archiver did not write and events no checkpoint covers:
rows past the recorded head, a rewritten unsigned tail, unsigned sagas and tails (failed with
``require_signed``), and a pinned key under which nothing is signed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import psycopg
import pytest
from archive_helpers import as_raw, make_chain
from click.testing import CliRunner

from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.archive import (
    AuditReason,
    BatchArchiver,
    Signer,
    audit,
    generate_key,
    sign_pending,
)
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    """One archiver (the ingest paths are compared elsewhere)."""
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()


@pytest.fixture
def signer(tmp_path) -> Signer:
    return generate_key(tmp_path / "archive.key")


@pytest.fixture
def archived(archiver, archive_dsn, signer):
    """Three sagas of 6 events; heads signed at seq 5, then seq 6 archived unsigned."""
    chains = {s: make_chain(s, 6) for s in ("saga-1", "saga-2", "saga-3")}
    archiver.archive(as_raw([e for c in chains.values() for e in c[:5]]))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 3
    archiver.archive(as_raw([c[5] for c in chains.values()], first_offset=15))
    return chains


def insert_rows(dsn: str, entries) -> None:
    """Insert rows straight into the evidence table, as anyone with INSERT can: no head moves."""
    with psycopg.connect(dsn) as conn:
        for e in entries:
            conn.execute(
                "INSERT INTO side_effect_journal (saga_id, seq, event_type, tool, payload,"
                " result, error, actor, attributes, recorded_at_us, hash, prev_hash, topic,"
                " kafka_partition, kafka_offset) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s,"
                " %s, %s, %s, 't', 0, 999)",
                (
                    e.saga_id,
                    e.seq,
                    e.event_type.value,
                    e.tool,
                    e.payload,
                    e.result,
                    e.error,
                    e.actor,
                    json.dumps(dict(e.attributes)),
                    e.recorded_at_us,
                    e.hash,
                    e.prev_hash,
                ),
            )


def audits(dsn: str, signer: Signer, **kwargs):
    """The audit straight from the columns and the reference path's (they must agree)."""
    with psycopg.connect(dsn) as conn:
        fast = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], **kwargs)
        reference = audit(
            PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], reference=True, **kwargs
        )
    assert fast.failures == reference.failures
    return fast


def test_a_valid_row_past_the_recorded_head_is_reported(archived, archive_dsn, signer):
    chain = archived["saga-2"]
    extra = link(dataclasses.replace(chain[5], result="more"), seq=7, prev_hash=chain[5].hash)
    insert_rows(archive_dsn, [extra])
    summary = audits(archive_dsn, signer)
    assert not summary.all_ok
    (failure,) = summary.failures
    assert (failure.saga_id, failure.reason, failure.bad_seq) == (
        "saga-2",
        AuditReason.BEYOND_HEAD,
        7,
    )
    assert "recorded head seq 6" in (failure.detail or "")


def test_a_saga_with_rows_and_no_recorded_head_is_reported(archived, archive_dsn, signer):
    insert_rows(archive_dsn, make_chain("saga-invented", 3))
    summary = audits(archive_dsn, signer)
    (failure,) = summary.failures
    assert (failure.saga_id, failure.reason, failure.bad_seq) == (
        "saga-invented",
        AuditReason.BEYOND_HEAD,
        1,
    )


def test_an_unsigned_tail_rewritten_consistently_differs_from_the_recorded_head(
    archived, archive_dsn, signer
):
    chain = archived["saga-2"]
    forged = link(dataclasses.replace(chain[5], result="forged"), seq=6, prev_hash=chain[4].hash)
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE side_effect_journal SET result = %s, hash = %s WHERE saga_id = 'saga-2'"
            " AND seq = 6",
            (forged.result, forged.hash),
        )
    (failure,) = audits(archive_dsn, signer).failures
    assert (failure.reason, failure.bad_seq) == (AuditReason.HEAD_MISMATCH, 6)


def test_unsigned_tails_and_sagas_are_counted_and_fail_when_signatures_are_required(
    archived, archiver, archive_dsn, signer
):
    archiver.archive(as_raw(make_chain("saga-new", 2), first_offset=100))
    summary = audits(archive_dsn, signer)
    assert summary.all_ok
    assert (summary.unsigned_tails, summary.unsigned_sagas, summary.unsigned_events) == (3, 1, 5)
    assert [(u.saga_id, u.signed_seq, u.unsigned) for u in summary.unsigned] == [
        ("saga-1", 5, 1),
        ("saga-2", 5, 1),
        ("saga-3", 5, 1),
        ("saga-new", 0, 2),
    ]
    strict = audits(archive_dsn, signer, require_signed=True)
    assert not strict.all_ok
    assert strict.by_reason == {AuditReason.UNSIGNED: 4}
    found = {f.saga_id: (f.bad_seq, f.detail) for f in strict.failures}
    assert found["saga-1"] == (6, "seqs 6..6 follow the last checkpoint (seq 5)")
    assert found["saga-new"] == (1, "no checkpoint covers any of seqs 1..2")
    with psycopg.connect(archive_dsn) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
    signed = audits(archive_dsn, signer, require_signed=True)
    assert signed.all_ok, signed.failures
    assert (signed.unsigned_tails, signed.unsigned_sagas) == (0, 0)


def test_a_pinned_key_with_nothing_signed_fails(archiver, archive_dsn, signer):
    archiver.archive(as_raw(make_chain("saga-1", 3)))
    with psycopg.connect(archive_dsn) as conn:
        pinned = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        unpinned = audit(PostgresArchiveAudits(conn))
    assert pinned.ok == pinned.sagas == 1
    assert pinned.nothing_signed
    assert not pinned.all_ok
    assert unpinned.all_ok  # without a pinned key nothing is asserted about signatures
    assert unpinned.unsigned_sagas == 1


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout + result.stderr


def _count(out: str, label: str) -> int:
    line = next(x for x in out.splitlines() if x.startswith(label))
    return int(line.split()[-1].replace(",", ""))


def test_verify_exit_codes_for_coverage(archived, archive_dsn, signer):
    key = signer.public_hex
    code, out = run("verify", "--database-url", archive_dsn, "--public-key", key)
    assert code == 0, out
    assert _count(out, "unsigned tails") == 3
    assert "--require-signed fails them" in out
    assert "saga (passed, not all signed)" in out
    line = next(x for x in out.splitlines() if x.startswith("saga-2"))
    assert line.split()[1] == "6..6"
    code, out = run(
        "verify", "--database-url", archive_dsn, "--public-key", key, "--require-signed"
    )
    assert code == 1, out
    line = next(x for x in out.splitlines() if x.startswith("saga-2"))
    assert line.split()[1:3] == ["6", "unsigned"]
    code, out = run(
        "verify", "--saga", "saga-3", "--database-url", archive_dsn, "--public-key", key
    )
    assert code == 0, out
    chain = archived["saga-3"]
    insert_rows(
        archive_dsn,
        [link(dataclasses.replace(chain[5], result="x"), seq=7, prev_hash=chain[5].hash)],
    )
    code, out = run("verify", "--database-url", archive_dsn, "--public-key", key)
    assert code == 1, out
    line = next(x for x in out.splitlines() if x.startswith("saga-3"))
    assert line.split()[1:3] == ["7", "beyond_head"]


def test_verify_with_a_pinned_key_on_an_unsigned_archive_exits_1(archiver, archive_dsn, signer):
    archiver.archive(as_raw(make_chain("saga-1", 3)))
    code, out = run("verify", "--database-url", archive_dsn, "--public-key", signer.public_hex)
    assert code == 1, out
    assert "nothing in the archive is signed by the pinned key" in out
    assert _count(out, "unsigned sagas") == 1
    code, out = run("verify", "--database-url", archive_dsn)
    assert code == 0, out
