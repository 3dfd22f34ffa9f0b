"""``sagacity dev up | status | down`` on a private state directory."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from sagacity.cli import main


def _exports(stdout: str) -> dict[str, str]:
    values = {}
    for line in stdout.splitlines():
        assert line.startswith("export "), f"not an export line: {line!r}"
        name, _, value = line.removeprefix("export ").partition("=")
        values[name] = value
    return values


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
def test_up_is_idempotent_status_reports_and_down_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    runner = CliRunner()
    try:
        first = runner.invoke(main, ["dev", "up"])
        assert first.exit_code == 0, first.output
        env = _exports(first.stdout)
        assert set(env) == {
            "SAGACITY_BOOTSTRAP_SERVERS",
            "SAGACITY_DATABASE_URL",
            "SAGACITY_KEY_ENCRYPTION_KEY_FILE",
        }
        assert env["SAGACITY_KEY_ENCRYPTION_KEY_FILE"] == str(tmp_path / "dev" / "journal.kek")
        assert "kafka: started" in first.stderr

        metadata = AdminClient(
            {"bootstrap.servers": env["SAGACITY_BOOTSTRAP_SERVERS"]}
        ).list_topics(timeout=10)
        assert metadata.brokers
        with psycopg.connect(env["SAGACITY_DATABASE_URL"]) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("sagacity",)

        second = runner.invoke(main, ["dev", "up"])
        assert second.exit_code == 0, second.output
        assert _exports(second.stdout) == env
        assert "kafka: reused" in second.stderr
        assert "postgres: reused" in second.stderr

        status = runner.invoke(main, ["dev", "status"])
        assert status.exit_code == 0, status.output
        assert status.stdout.count("running") == 2
    finally:
        down = runner.invoke(main, ["dev", "down"])
    assert down.exit_code == 0, down.output
    assert "kafka" in down.stderr
    assert "postgres" in down.stderr
    after = runner.invoke(main, ["dev", "status"])
    assert after.exit_code == 1
    assert after.stdout.count("stopped") == 2

    data_root = Path(json.loads((tmp_path / "dev/postgres/state.json").read_text())["root"])
    purge = runner.invoke(main, ["dev", "down", "--purge"])
    assert purge.exit_code == 0, purge.output
    assert not (tmp_path / "dev").exists()
    assert not data_root.exists()


def test_status_of_a_fresh_directory_reports_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    result = CliRunner().invoke(main, ["dev", "status"])
    assert result.exit_code == 1
    assert "kafka     stopped" in result.stdout


def test_up_without_java_fails_naming_java_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    result = CliRunner().invoke(main, ["dev", "up", "--no-postgres"])
    assert result.exit_code == 2
    assert "java is not installed" in result.stderr
    assert "apt-get install openjdk-17-jre-headless" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "dev" / "kafka" / "state.json").exists()


@pytest.mark.postgres
def test_up_stops_the_server_it_started_when_the_other_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagacity.dev import Stack

    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    # Java missing, PostgreSQL present (its programs are found outside PATH).
    monkeypatch.setenv("PATH", "/nonexistent")
    result = CliRunner().invoke(main, ["dev", "up"])
    assert result.exit_code == 2
    assert "java" in result.stderr
    stack = Stack()
    try:
        statuses = {s.name: s for s in stack.status()}
        assert not statuses["postgres"].running
        assert not statuses["kafka"].running
    finally:
        stack.purge()
