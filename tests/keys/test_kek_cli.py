"""``sagacity keys``: writing a key-encryption key, and rotating to a new one."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._envelope import (
    KEK_SETTING,
    KeyEncryptionKey,
    KeyRing,
    write_key_encryption_key,
)
from sagacity.privacy._keys import KeyService


def test_keys_init_writes_a_private_kek_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "journal.kek"
    done = CliRunner().invoke(main, ["keys", "init", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert out.stat().st_mode & 0o777 == 0o600
    kek = KeyEncryptionKey.from_file(out)
    assert f"key id:             {kek.key_id}" in done.output
    assert f"{KEK_SETTING}={out}" in done.output
    before = out.read_bytes()
    again = CliRunner().invoke(main, ["keys", "init", "--out", str(out)])
    assert again.exit_code == 2
    assert "refusing to overwrite" in again.output
    assert out.read_bytes() == before


@pytest.mark.postgres
def test_keys_rotate_rewraps_every_key_under_the_new_kek(tmp_path: Path, pg_dsn: str) -> None:
    old = write_key_encryption_key(tmp_path / "old.kek")
    writer = KeyService(PostgresKeyStore(pg_dsn), KeyRing((old,)))
    try:
        sealed = [writer.seal(f"s-{n}", 1, "payload", b"x") for n in range(5)]
    finally:
        writer.close()
    CliRunner().invoke(main, ["keys", "init", "--out", str(tmp_path / "new.kek")])
    new = KeyEncryptionKey.from_file(tmp_path / "new.kek")
    env = {KEK_SETTING: str(tmp_path / "old.kek"), "SAGACITY_DATABASE_URL": pg_dsn}
    done = CliRunner().invoke(main, ["keys", "rotate", "--new", str(tmp_path / "new.kek")], env=env)
    assert done.exit_code == 0, done.output
    assert f"rewrapped 5 data key(s) under {new.key_id}" in done.output
    assert "destroy the old one" in done.output
    status = CliRunner().invoke(main, ["keys", "status"], env=env)
    assert status.output.strip() == f"{new.key_id}: 5 live key(s)"
    reader = KeyService(PostgresKeyStore(pg_dsn), KeyRing((new,)))
    try:
        for n, blob in enumerate(sealed):
            assert reader.open(f"s-{n}", 1, "payload", blob) == b"x"
    finally:
        reader.close()


@pytest.mark.postgres
def test_keys_rotate_fails_while_keys_remain_under_a_kek_it_was_not_given(
    tmp_path: Path, pg_dsn: str
) -> None:
    stray = write_key_encryption_key(tmp_path / "stray.kek")
    write_key_encryption_key(tmp_path / "old.kek")
    write_key_encryption_key(tmp_path / "new.kek")
    writer = KeyService(PostgresKeyStore(pg_dsn), KeyRing((stray,)))
    try:
        writer.seal("s-1", 1, "payload", b"x")
    finally:
        writer.close()
    env = {KEK_SETTING: str(tmp_path / "old.kek"), "SAGACITY_DATABASE_URL": pg_dsn}
    done = CliRunner().invoke(main, ["keys", "rotate", "--new", str(tmp_path / "new.kek")], env=env)
    assert done.exit_code == 1
    assert f"data keys remain under {stray.key_id}" in done.output


@pytest.mark.parametrize(
    ("args", "env", "problem"),
    [
        (["--new", "absent.kek"], {KEK_SETTING: "old.kek"}, "--new: absent.kek does not exist"),
        (["--new", "new.kek"], {KEK_SETTING: "absent.kek"}, f"{KEK_SETTING}: absent.kek does"),
        (["--new", "new.kek"], {}, "Missing option '--current'"),
    ],
)
def test_keys_rotate_names_a_missing_or_bad_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(KEK_SETTING, raising=False)
    write_key_encryption_key(tmp_path / "old.kek")
    write_key_encryption_key(tmp_path / "new.kek")
    done = CliRunner().invoke(
        main,
        ["keys", "rotate", *args],
        env={**env, "SAGACITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},
    )
    assert done.exit_code == 2
    assert problem in done.output


def test_keys_status_on_an_unreachable_database_exits_3() -> None:
    done = CliRunner().invoke(
        main,
        ["keys", "status"],
        env={"SAGACITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"},
    )
    assert done.exit_code == 3
    assert "key store: connect: database unavailable" in done.output


def test_keys_init_prints_the_absolute_path_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variable it prints works from any directory: the path is absolute."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["keys", "init", "--out", "journal.kek"])
    assert result.exit_code == 0, result.output
    assert f"SAGACITY_KEY_ENCRYPTION_KEY_FILE={tmp_path / 'journal.kek'}" in result.stdout
    assert f"key-encryption key: {tmp_path / 'journal.kek'}" in result.stdout
