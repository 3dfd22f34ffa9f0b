"""One table of exit statuses (README.md, "Exit status, output and logs"; ``sagacity.cli._exit``)
and a command of each row exiting with it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import sagacity.cli._exit as exits
from sagacity.cli import main
from sagacity.dev import pick_free_port

ROOT = Path(__file__).resolve().parents[2]


def _readme_table() -> dict[int, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Exit status, output and logs", 1)[1]
    return {
        int(m.group(1)): " ".join(m.group(2).split())
        for m in re.finditer(r"^\| (\d) \| (.+?) \|$", section, re.MULTILINE)
    }


def _module_table() -> dict[int, str]:
    doc = exits.__doc__ or ""
    rows: dict[int, str] = {}
    current = None
    for line in doc.splitlines():
        if m := re.match(r"^(\d)\s{2,}(.*)$", line):
            current = int(m.group(1))
            rows[current] = m.group(2)
        elif current is not None and line.startswith("       ") and line.strip():
            rows[current] += " " + line.strip()
        elif line.startswith("====="):
            current = None
    return {code: " ".join(text.split()) for code, text in rows.items()}


def test_the_readme_shows_the_table_the_commands_follow() -> None:
    table = _readme_table()
    assert table == _module_table()
    assert sorted(table) == sorted({exits.OK, exits.FAILED, exits.USAGE, exits.UNAVAILABLE})


def _run(*args: str, env: dict[str, str | None] | None = None) -> int:
    return CliRunner().invoke(main, list(args), env=env).exit_code


def test_done_is_0(tmp_path: Path) -> None:
    assert _run("keys", "init", "--out", str(tmp_path / "journal.kek")) == exits.OK


def test_a_failed_check_or_a_refusal_is_1(tmp_path: Path) -> None:
    # A service of the stack down.
    assert _run("dev", "status", env={"SAGACITY_DEV_HOME": str(tmp_path)}) == exits.FAILED


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--no-such-option"],
        ["keys", "init"],  # a missing option
        ["dev", "kill-broker", "1"],  # no cluster to act on
    ],
    ids=lambda args: " ".join(args),
)
def test_a_command_that_cannot_run_is_2(args: list[str], tmp_path: Path) -> None:
    assert _run(*args, env={"SAGACITY_DEV_HOME": str(tmp_path)}) == exits.USAGE


def test_a_service_without_a_key_encryption_key_is_2(tmp_path: Path) -> None:
    env: dict[str, str | None] = {
        "SAGACITY_KEY_ENCRYPTION_KEY_FILE": None,
        "SAGACITY_ALLOW_CLEAR_DATA": None,
    }
    args = ["serve", "archive", "--bootstrap-servers", "127.0.0.1:9"]
    code = _run(*args, "--database-url", "postgresql://nobody@127.0.0.1:9/none", env=env)
    assert code == exits.USAGE


def test_an_unreachable_dependency_is_3() -> None:
    dead = f"postgresql://nobody@127.0.0.1:{pick_free_port()}/none?connect_timeout=2"
    assert _run("verify", "--all", "--database-url", dead) == exits.UNAVAILABLE
    env = {**os.environ, "SAGACITY_APPROVALS_URL": f"http://127.0.0.1:{pick_free_port()}"}
    assert _run("approvals", "list", env=dict(env)) == exits.UNAVAILABLE


def test_allow_clear_data_takes_a_service_past_the_key_check_for_its_run_only() -> None:
    """``--allow-clear-data`` is its variable for the command's run: the archive starts without
    a key (and then finds no broker: 3, not the key's 2), and the variable is gone after."""
    env: dict[str, str | None] = {
        "SAGACITY_KEY_ENCRYPTION_KEY_FILE": None,
        "SAGACITY_ALLOW_CLEAR_DATA": None,
    }
    dead = f"127.0.0.1:{pick_free_port()}"
    args = ["serve", "archive", "--allow-clear-data", "--bootstrap-servers", dead]
    code = _run(*args, "--database-url", "postgresql://nobody@127.0.0.1:9/none", env=env)
    assert code == exits.UNAVAILABLE
    assert "SAGACITY_ALLOW_CLEAR_DATA" not in os.environ
