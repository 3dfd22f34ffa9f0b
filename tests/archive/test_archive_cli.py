"""``sagacity verify`` / ``sagacity archive`` against real Postgres, through click's runner."""

from __future__ import annotations

import json

import psycopg
import pytest
from archive_helpers import as_raw, make_chain
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.postgres.archive import PostgresCheckpointSigning

pytestmark = pytest.mark.postgres


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def sign(archiver, path) -> str:
    """Sign what ``archiver`` read (as its service does); the latest round as ``ID:ROOT``."""
    from sagacity.consumers.archive import SignedRound, Signer, sign_pending

    rounds: list[SignedRound] = []
    with psycopg.connect(archiver._store.conninfo) as conn:
        sign_pending(
            PostgresCheckpointSigning(conn),
            Signer.from_file(path),
            archiver.ledger,
            on_round=rounds.append,
        )
    return f"{rounds[-1].round_id}:{rounds[-1].root}"


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "k.pem"
    code, out, _ = run("archive", "keygen", "--out", str(path))
    assert code == 0
    public = out.split("public key:")[1].strip()
    return path, public


def test_verify_passes_then_fails_with_the_broken_seq(archiver, archive_dsn, key):
    path, public = key
    archiver.archive(as_raw(make_chain("saga-ok", 4) + make_chain("saga-bad", 4)))
    # The round to publish is the one verify reports as the archive's latest.
    published = sign(archiver, path)
    code, out, _ = run("verify", "--database-url", archive_dsn, "--public-key", public)
    assert code == 0, out
    assert "sagas ok" in out
    assert "checkpoints verified" in out
    assert published in out
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE side_effect_journal SET result = 'no' WHERE saga_id = 'saga-bad' AND seq = 2"
        )
    code, out, _ = run("verify", "--all", "--database-url", archive_dsn, "--public-key", public)
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("saga-bad"))
    assert line.split()[1:3] == ["2", "edited"]
    code, out, _ = run("verify", "--database-url", archive_dsn, "--public-key", public, "--json")
    assert code == 1
    report = json.loads(out)
    assert (report["ok"], report["sagas"], report["sagas_ok"]) == (False, 2, 1)
    assert report["failures"][0]["saga_id"] == "saga-bad"
    assert (report["failures"][0]["seq"], report["failures"][0]["reason"]) == (2, "edited")
    code, out, _ = run("verify", "--saga", "saga-ok", "--database-url", archive_dsn)
    assert code == 0
    assert "pass --public-key" in out


def test_verify_fails_on_a_round_whose_checkpoints_were_all_removed(archiver, archive_dsn, key):
    """No saga is left to fail, but the signed round counts heads the archive lost: exit 1,
    the round listed."""
    path, public = key
    archiver.archive(as_raw(make_chain("saga-1", 3) + make_chain("saga-2", 3)))
    sign(archiver, path)
    code, out, _ = run("verify", "--database-url", archive_dsn, "--public-key", public)
    assert code == 0, out
    assert [x.split()[-1] for x in out.splitlines() if x.startswith("signing rounds")] == ["1"]
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM archive_checkpoint")
    code, out, _ = run("verify", "--database-url", archive_dsn, "--public-key", public)
    assert code == 1, out
    assert "signed 2 heads; the archive holds 0" in out
    assert [x.split()[-1] for x in out.splitlines() if x.strip().startswith("failed")] == ["1"]


def test_verify_prints_the_latest_round_and_checks_a_recorded_one(archiver, archive_dsn, key):
    path, public = key
    archiver.archive(as_raw(make_chain("saga-1", 2)))
    sign(archiver, path)
    code, out, _ = run("verify", "--database-url", archive_dsn, "--public-key", public)
    assert code == 0, out
    latest = next(x for x in out.splitlines() if x.startswith("latest signing round:"))
    recorded = latest.split()[3]
    base = ("verify", "--database-url", archive_dsn, "--public-key", public)
    code, out, _ = run(*base, "--round", recorded)
    assert code == 0, out
    number = recorded.split(":")[0]
    code, out, _ = run(*base, "--round", f"{number}:{'ab' * 32}")
    assert code == 1
    assert "the round was replaced" in out
    code, out, _ = run(*base, "--round", f"{int(number) + 5}:{'ab' * 32}")
    assert code == 1
    assert "is not in the archive" in out
    code, _, err = run(*base, "--round", "x:y")
    assert code == 2
    assert "expected ID:ROOT" in err
    code, _, err = run(*base, "--saga", "saga-1", "--round", recorded)
    assert code == 2
    assert "drop --saga" in err


def test_verify_on_an_empty_schema_says_so(pg_dsn):
    code, _, err = run("verify", "--database-url", pg_dsn)
    assert code == 2
    assert "is not a Sagacity archive" in err


def test_verify_on_a_missing_schema_says_so(pg_dsn):
    code, _, err = run("verify", "--database-url", pg_dsn, "--schema", "no_such_schema")
    assert code == 2
    assert "search_path" in err


def test_verify_an_unknown_saga_is_an_error(archive_dsn):
    code, _, err = run("verify", "--saga", "nobody", "--database-url", archive_dsn)
    assert code == 2
    assert "nothing for saga 'nobody'" in err


def test_verify_unreachable_database(tmp_path):
    code, _, err = run("verify", "--database-url", "host=127.0.0.1 port=1 connect_timeout=1")
    assert code == 3  # unreachable, as for every command
    assert "unavailable" in err


def test_keygen_refuses_to_overwrite(key):
    path, _ = key
    code, _, err = run("archive", "keygen", "--out", str(path))
    assert code == 2
    assert "refusing to overwrite" in err


def test_migrate_command_creates_the_schema(pg_dsn):
    code, out, _ = run("archive", "migrate", "--database-url", pg_dsn)
    assert code == 0
    from sagacity.postgres.archive import MIGRATIONS

    assert f"version {max(v for v, _ in MIGRATIONS)}" in out
    code, out, _ = run("verify", "--database-url", pg_dsn)
    assert code == 0
    assert "sagas verified" in out


def test_serve_archive_with_an_unreadable_signing_key_says_so(archive_dsn, tmp_path):
    bad = tmp_path / "not-a-key.pem"
    bad.write_text("hello")
    args = ["serve", "archive", "--bootstrap-servers", "127.0.0.1:1", "--database-url", archive_dsn]
    code, _, err = run(*args, "--signing-key", str(bad))
    assert code == 2
    assert "is not a PEM private key" in err
    code, _, err = run(*args, "--signing-key", str(tmp_path / "missing.pem"))
    assert code == 2
    assert "cannot read signing key" in err


def test_checkpoint_command_with_a_non_ed25519_key(archive_dsn, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "ec.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    code, _, err = run(
        "archive",
        "checkpoint",
        "--database-url",
        archive_dsn,
        "--bootstrap-servers",
        "127.0.0.1:9",  # the key is refused before the brokers are asked anything
        "--signing-key",
        str(path),
    )
    assert code == 2
    assert "not an Ed25519 key" in err


def test_verify_rejects_a_malformed_public_key(archive_dsn):
    code, _, err = run("verify", "--database-url", archive_dsn, "--public-key", "abcd")
    assert code == 2
    assert "64 hex characters" in err


def test_quarantine_command_lists_refused_events(archiver, archive_dsn):
    from sagacity.consumers.archive import RawEvent

    code, out, _ = run("archive", "quarantine", "--database-url", archive_dsn)
    assert (code, out.strip()) == (0, "quarantine is empty")
    chain = make_chain("saga-q", 3)
    archiver.archive(
        [RawEvent(topic="t", partition=2, offset=9, key=None, value=b"junk"), *as_raw(chain[1:])]
    )
    code, out, _ = run("archive", "quarantine", "--database-url", archive_dsn)
    assert code == 1
    assert "t[2]@9" in out
    assert "saga-q#2" in out
    assert any(line.split() == ["undecodable", "1"] for line in out.splitlines())
    assert any(line.split() == ["gap", "2"] for line in out.splitlines())
