"""Retention on real Postgres: whole expired months exported then dropped, chains that cross
the boundary still verify, short retentions refused."""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import sys
import uuid

import psycopg
import pytest
from archive_helpers import as_raw, decode, make_chain, rows, with_option
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver, Signer, audit, generate_key, sign_pending
from sagacity.consumers.archive._export import export_bundle
from sagacity.consumers.archive._retention import (
    cutoff_us,
    parse_keep,
    run_retention,
    sign_records,
)
from sagacity.errors import PersistenceError, RetentionError
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    PostgresRetention,
    PostgresSagaBundles,
    grant_archiver,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres

OCT_2024 = int(datetime.datetime(2024, 10, 20, tzinfo=datetime.UTC).timestamp()) * 1_000_000
JUN_2025 = int(datetime.datetime(2025, 6, 5, tzinfo=datetime.UTC).timestamp()) * 1_000_000
NOW = datetime.datetime(2026, 12, 2, 15, 0, tzinfo=datetime.UTC)


def test_parse_keep_and_cutoff():
    assert parse_keep("24mo") == 24
    assert parse_keep("2y") == 24
    with pytest.raises(RetentionError):
        parse_keep("two years")
    cut = datetime.datetime.fromtimestamp(cutoff_us(24, NOW) / 1e6, datetime.UTC)
    assert cut == datetime.datetime(2024, 12, 2, 15, 0, tzinfo=datetime.UTC)
    leap = datetime.datetime(2024, 3, 31, tzinfo=datetime.UTC)
    assert datetime.datetime.fromtimestamp(cutoff_us(1, leap) / 1e6, datetime.UTC).day == 29


@pytest.fixture
def signer(tmp_path_factory) -> Signer:
    return generate_key(tmp_path_factory.mktemp("keys") / "archive.key")


@pytest.fixture
def spanning(archiver, archive_dsn):
    """saga-span: seq 1..3 in Oct 2024, seq 4..5 in Jun 2025; saga-old: Oct 2024 only."""
    span = make_chain("saga-span", 5, start_us=OCT_2024)
    span = span[:3] + list(_retime(span, JUN_2025)[3:])
    old = make_chain("saga-old", 2, start_us=OCT_2024)
    assert archiver.archive(as_raw(span + old)).archived == 7
    return span


def _retime(chain, at_us):
    """The chain with entries from seq 4 on moved to ``at_us`` (links recomputed)."""
    import dataclasses

    from sagacity.chain import link

    out, prev = [], "0" * 64
    for e in chain:
        d = dataclasses.replace(e, recorded_at_us=at_us + e.seq) if e.seq >= 4 else e
        x = link(d, seq=e.seq, prev_hash=prev)
        out.append(x)
        prev = x.hash
    return out


def test_dry_run_reports_without_dropping(spanning, archive_dsn):
    with psycopg.connect(archive_dsn) as conn:
        actions = run_retention(PostgresRetention(conn), keep_months=24, now=NOW)
    assert [(a.partition.name, a.rows, a.dropped) for a in actions] == [
        ("side_effect_journal_p202410", 5, False)
    ]
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(7,)]


def test_apply_exports_then_drops_and_chains_still_verify(spanning, archive_dsn, tmp_path, signer):
    with psycopg.connect(archive_dsn) as conn:
        (action,) = run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path,
            apply=True,
            now=NOW,
            signer=signer,
        )
    assert action.dropped
    assert action.rows == 5
    data = action.export_file.read_bytes()
    assert hashlib.sha256(data).hexdigest() == action.export_sha256
    exported = [json.loads(line) for line in data.splitlines()]
    assert [(e["saga_id"], e["seq"]) for e in exported] == [
        ("saga-old", 1),
        ("saga-old", 2),
        ("saga-span", 1),
        ("saga-span", 2),
        ("saga-span", 3),
    ]
    assert exported[3]["hash"] == spanning[1].hash
    assert rows(archive_dsn, "SELECT saga_id, seq FROM side_effect_journal") == [
        ("saga-span", 4),
        ("saga-span", 5),
    ]
    assert rows(archive_dsn, "SELECT export_sha256, row_count FROM archive_retention") == [
        (action.export_sha256, 5)
    ]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn))
    # saga-old survives as anchors only; saga-span verifies from its anchor at seq 3.
    assert (summary.sagas, summary.ok) == (2, 2), summary.failures


def test_deleting_the_rest_of_a_retained_chain_is_still_detected(
    spanning, archive_dsn, tmp_path, signer
):
    with psycopg.connect(archive_dsn) as conn:
        run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path,
            apply=True,
            now=NOW,
            signer=signer,
        )
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM side_effect_journal WHERE seq = 4")
        conn.commit()
        summary = audit(PostgresArchiveAudits(conn))
    (failure,) = summary.failures
    assert (failure.saga_id, failure.bad_seq, failure.reason) == ("saga-span", 4, "gap")


def test_short_retention_is_refused_unless_forced(spanning, archive_dsn, tmp_path):
    with psycopg.connect(archive_dsn) as conn:
        with pytest.raises(RetentionError, match="shorter than the 6 months"):
            run_retention(PostgresRetention(conn), keep_months=5, now=NOW)
        assert (
            run_retention(PostgresRetention(conn), keep_months=5, force=True, now=NOW)[0].dropped
            is False
        )
        with pytest.raises(RetentionError, match="--export-dir"):
            run_retention(PostgresRetention(conn), keep_months=24, apply=True, now=NOW)
        with pytest.raises(RetentionError, match="--signing-key"):
            run_retention(
                PostgresRetention(conn), keep_months=24, export_dir=tmp_path, apply=True, now=NOW
            )


def test_archiver_role_cannot_drop_months(spanning, archive_dsn, tmp_path, signer):
    role = "sgc_test_" + uuid.uuid4().hex[:8]
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        grant_archiver(conn, role)
        conn.execute(f'GRANT "{role}" TO current_user')
    try:
        with (
            psycopg.connect(with_option(archive_dsn, f"-c role={role}")) as conn,
            pytest.raises(PersistenceError, match="permission denied"),
        ):
            run_retention(
                PostgresRetention(conn),
                keep_months=24,
                export_dir=tmp_path,
                apply=True,
                now=NOW,
                signer=signer,
            )
        assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(7,)]
        assert list(tmp_path.iterdir()) == []
    finally:
        with psycopg.connect(archive_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_archiver_recreates_a_month_dropped_under_it(spanning, archive_dsn, tmp_path, signer):
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g2",
        decode=decode,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        late = make_chain("saga-late", 1, start_us=OCT_2024)
        archiver.archive(as_raw(late, topic="x"))  # caches October 2024 as existing
        with psycopg.connect(archive_dsn) as conn:
            run_retention(
                PostgresRetention(conn),
                keep_months=24,
                export_dir=tmp_path,
                apply=True,
                now=NOW,
                signer=signer,
            )
        again = make_chain("saga-later", 1, start_us=OCT_2024)
        assert archiver.archive(as_raw(again, topic="x", first_offset=1)).archived == 1
    finally:
        archiver.close()


def test_retention_cli(archiver, archive_dsn, tmp_path):
    archiver.archive(as_raw(make_chain("saga-2020", 2, start_us=1_580_000_000_000_000)))
    archiver.archive(
        as_raw(make_chain("saga-now", 2, start_us=int(NOW.timestamp() * 1e6)), first_offset=2)
    )
    runner = CliRunner()
    base = ["archive", "retention", "--database-url", archive_dsn]
    result = runner.invoke(main, [*base, "--keep", "3mo"])
    assert result.exit_code == 2
    assert "pass --force" in result.stderr
    result = runner.invoke(main, [*base, "--keep", "24mo"])
    assert result.exit_code == 0
    assert "would export and drop" in result.stdout
    assert "side_effect_journal_p202001" in result.stdout
    apply = [*base, "--keep", "24mo", "--apply", "--export-dir", str(tmp_path)]
    result = runner.invoke(main, apply)
    assert result.exit_code == 2
    assert "--signing-key" in result.stderr
    generate_key(tmp_path / "k.pem")
    result = runner.invoke(main, [*apply, "--signing-key", str(tmp_path / "k.pem")])
    assert result.exit_code == 0, result.output
    assert "dropped" in result.stdout
    assert (tmp_path / "side_effect_journal_p202001.jsonl").exists()
    assert rows(archive_dsn, "SELECT DISTINCT saga_id FROM side_effect_journal") == [("saga-now",)]


def test_export_that_cannot_be_written_drops_nothing(spanning, archive_dsn, tmp_path, signer):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with psycopg.connect(archive_dsn) as conn, pytest.raises(RetentionError, match="cannot"):
        run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=blocker / "exports",
            apply=True,
            now=NOW,
            signer=signer,
        )
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(7,)]
    assert rows(archive_dsn, "SELECT count(*) FROM archive_retention") == [(0,)]


def _forge_anchor(dsn: str, statements: list[tuple[str, tuple[object, ...]]]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        for sql, params in statements:
            conn.execute(sql, params)


def test_a_forged_anchor_is_reported(spanning, archiver, archive_dsn, tmp_path, signer):
    """Someone able to write the database deletes the start of a saga kept in full and inserts
    an anchor naming a dropped month, so that what is left looks retired: its anchor is not a
    leaf of that month's signed record, so the record fails, and every saga anchored there."""
    kept = make_chain("saga-kept", 4, start_us=JUN_2025)
    archiver.archive(as_raw(kept, first_offset=7))
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path,
            apply=True,
            now=NOW,
            signer=signer,
        )
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
    assert (summary.sagas, summary.ok, summary.retention.records) == (3, 3, 1)
    assert rows(archive_dsn, "SELECT anchor_count FROM archive_retention") == [(2,)]
    _forge_anchor(
        archive_dsn,
        [
            ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-kept' AND seq <= 2", ()),
            (
                "INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name,"
                " leaf_index) VALUES ('saga-kept', 2, %s, 'side_effect_journal_p202410', 2)",
                (kept[1].hash,),
            ),
        ],
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
    assert not summary.all_ok
    assert list(summary.retention.failed) == ["side_effect_journal_p202410"]
    assert (
        "do not hash to its signed root (2 signed, 3 held)"
        in (summary.retention.failed["side_effect_journal_p202410"])
    )
    assert {(f.saga_id, f.reason) for f in summary.failures} == {
        (s, "forged_anchor") for s in ("saga-kept", "saga-old", "saga-span")
    }
    with psycopg.connect(archive_dsn) as conn:
        alone = audit(PostgresArchiveAudits(conn), saga_id="saga-kept", pinned_keys=keys)
    assert [(f.bad_seq, f.reason) for f in alone.failures] == [(2, "forged_anchor")]
    result = CliRunner().invoke(
        main, ["verify", "--database-url", archive_dsn, "--public-key", signer.public_hex]
    )
    assert result.exit_code == 1
    assert "forged_anchor" in result.stdout
    assert "side_effect_journal_p202410" in result.stdout


def test_anchors_of_unsigned_records_fail_until_the_records_are_signed(
    spanning, archive_dsn, tmp_path, signer
):
    """A month dropped before records were signed has no signature: its anchors fail verify
    until the operator signs the records once (and an edited record fails again)."""
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path,
            apply=True,
            now=NOW,
            signer=signer,
        )
    _forge_anchor(
        archive_dsn,
        [
            (
                "UPDATE archive_retention SET anchor_count = NULL, anchors_root = NULL,"
                " signed_at_us = NULL, key_id = NULL, signature = NULL",
                (),
            ),
            ("UPDATE archive_retention_anchor SET leaf_index = NULL", ()),
        ],
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
        assert "is not signed" in summary.retention.failed["side_effect_journal_p202410"]
        assert {f.reason for f in summary.failures} == {"forged_anchor"}
        assert sign_records(PostgresRetention(conn), signer) == 1
        assert sign_records(PostgresRetention(conn), signer) == 0
        after = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
        assert (after.retention.records, after.retention.failed, after.failures) == (1, {}, [])
    _forge_anchor(archive_dsn, [("UPDATE archive_retention SET row_count = row_count - 1", ())])
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
    assert "does not verify" in summary.retention.failed["side_effect_journal_p202410"]


def _verify_bundle(bundle, public_hex: str) -> tuple[int, str]:
    script = str(bundle / "verify_bundle.py")
    proc = subprocess.run(
        [sys.executable, "-I", script, str(bundle), "--public-key", public_hex],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_bundle_proves_its_anchor_and_refuses_a_forged_one(
    spanning, archiver, archive_dsn, tmp_path, signer
):
    """saga-span's bundle starts at its anchor: the anchor's signed retention record and its
    inclusion proof travel with it, and the standalone verifier checks both."""
    with psycopg.connect(archive_dsn) as conn:
        # the head is signed: the bundle covers it
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 2
        run_retention(
            PostgresRetention(conn),
            keep_months=24,
            export_dir=tmp_path,
            apply=True,
            now=NOW,
            signer=signer,
        )
        assert export_bundle(PostgresSagaBundles(conn), "saga-span", tmp_path / "b").ok
    manifest_path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    anchor = manifest["anchor"]
    assert (anchor["seq"], anchor["leaf_index"], anchor["record"]["anchor_count"]) == (3, 1, 2)
    code, out = _verify_bundle(tmp_path / "b", signer.public_hex)
    assert code == 0, out
    for edit, reason in [
        ({"leaf_index": 0}, "forged_anchor"),
        ({"record": None}, "forged_anchor"),
        ({"record": {**anchor["record"], "anchor_count": 3}}, "forged_anchor"),
        ({"record": {**anchor["record"], "key_id": "feedfeedfeedfeed"}}, "unknown_key"),
    ]:
        forged = {**anchor, **edit}
        if forged["record"] is None:
            del forged["record"]
        manifest_path.write_text(json.dumps({**manifest, "anchor": forged}))
        code, out = _verify_bundle(tmp_path / "b", signer.public_hex)
        assert code == 1, (edit, out)
        assert f"FAILED: {reason} at seq 3:" in out, out
