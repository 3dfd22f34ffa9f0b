"""A command that cannot run says so in one line with the exit status of its kind: a missing
extra (2), an unreachable broker (3, within 10 s); librdkafka's lines go through logging."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sagacity.dev import pick_free_port

# Runs the CLI as if the [services] extra's modules were not installed.
_WITHOUT_SERVICES = """
import sys
blocked = {"fastapi", "starlette", "uvicorn", "prometheus_client", "httpx", "jinja2"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from sagacity.cli import main
main(sys.argv[1:], prog_name="sagacity")
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "approvals", "--insecure-dev", "--database-url", "postgresql://x/y"],
        ["serve", "archive", "--bootstrap-servers", "x:1", "--database-url", "postgresql://x/y"],
        [
            "serve",
            "compensation",
            "--tools",
            "a:b",
            "--bootstrap-servers",
            "x:1",
            "--database-url",
            "postgresql://x/y",
        ],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_missing_extra_is_one_line_naming_it(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SERVICES, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    command = " ".join(a for a in argv[:2] if not a.startswith("-"))
    assert f"`sagacity {command}` needs the [services] extra" in lines[0]
    assert "pip install 'sagacity[services]'" in lines[0]
    assert not (tmp_path / "never-written.key").exists()


def test_the_approvals_client_needs_no_extra() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_SERVICES,
            "approvals",
            "--url",
            "http://127.0.0.1:9",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        done.stderr.strip()  # one line
    ]
    assert "cannot reach the approvals service" in done.stderr


# Runs `sagacity serve compensation` against a closed port after SLOW seconds of start-up
# (what a loaded machine spends starting the interpreter and importing the service).
_SLOW_START = """
import sys, time
time.sleep(float(sys.argv[1]))
from sagacity.cli import main
main(sys.argv[2:], prog_name="sagacity")
"""


@pytest.mark.parametrize("slow_start_s", [0.0, 4.0], ids=["at-once", "slow-start"])
def test_an_unreachable_broker_is_one_line_and_exit_3_within_10_seconds(
    slow_start_s: float,
) -> None:
    """Counted from launching the command: the start-up is inside the 10 s, not added."""
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _SLOW_START,
            str(slow_start_s),
            "serve",
            "compensation",
            "--tools",
            "sagacity.demo.tools:TOOLS",
            "--bootstrap-servers",
            f"127.0.0.1:{pick_free_port()}",
            "--database-url",
            "postgresql://nobody@127.0.0.1:1/none",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        # The broker is the subject: no key store to reach (clear data, said explicitly).
        env={
            **{k: v for k, v in os.environ.items() if k != "SAGACITY_KEY_ENCRYPTION_KEY_FILE"},
            "SAGACITY_ALLOW_CLEAR_DATA": "1",
        },
    )
    took = time.monotonic() - began
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "is unreachable: no answer within" in lines[0]
    assert took <= 10, took


def test_the_check_at_start_counts_from_the_process_start() -> None:
    from sagacity.producer._clients import (
        MIN_REACHABLE_TIMEOUT_S,
        REACHABLE_TIMEOUT_S,
        process_age,
        startup_timeout,
    )

    if sys.platform != "linux":
        assert process_age() is None  # unknown: the whole budget, as before
        assert startup_timeout() == REACHABLE_TIMEOUT_S
        return
    age = process_age()
    assert age is not None
    assert 0 < age < 24 * 3600
    assert startup_timeout() == pytest.approx(
        max(MIN_REACHABLE_TIMEOUT_S, REACHABLE_TIMEOUT_S - age), abs=0.5
    )
    # However late the check, the broker gets some time to answer.
    assert startup_timeout(budget=0.0) == MIN_REACHABLE_TIMEOUT_S


def test_the_process_age_of_a_fresh_process_is_its_age() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(1.5)\n"
            "from sagacity.producer._clients import process_age; print(process_age())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    if sys.platform == "linux":
        assert 1.5 <= float(done.stdout) < 30


def test_a_broker_check_started_early_reports_once_in_time() -> None:
    from sagacity.errors import JournalUnavailableError
    from sagacity.producer._clients import BrokerCheck

    began = time.monotonic()
    check = BrokerCheck({"bootstrap.servers": f"127.0.0.1:{pick_free_port()}"}, timeout=2.0)
    assert time.monotonic() - began < 1  # asked in the background: the caller goes on
    time.sleep(1.0)  # the caller's own start-up, overlapping the wait
    with pytest.raises(JournalUnavailableError, match="is unreachable: no answer within 2 s"):
        check.result()
    assert 2.0 - 0.5 <= time.monotonic() - began <= 4, time.monotonic() - began


@pytest.mark.kafka
def test_a_broker_check_returns_when_the_broker_answers(kafka_bootstrap: str) -> None:
    from sagacity.producer._clients import BrokerCheck

    began = time.monotonic()
    BrokerCheck({"bootstrap.servers": kafka_bootstrap}, timeout=8.0).result()
    assert time.monotonic() - began < 8


def test_the_broker_check_answers_within_10_seconds() -> None:
    from sagacity.errors import JournalUnavailableError
    from sagacity.producer._clients import REACHABLE_TIMEOUT_S, check_reachable

    began = time.monotonic()
    with pytest.raises(JournalUnavailableError, match="is unreachable") as info:
        check_reachable({"bootstrap.servers": f"127.0.0.1:{pick_free_port()}"})
    took = time.monotonic() - began
    assert REACHABLE_TIMEOUT_S - 0.5 <= took <= 10, took
    assert "\n" not in info.value.message


def test_librdkafka_lines_go_through_logging_once(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Consumer

    from sagacity.producer._clients import KAFKA_LOGGER, with_logger

    caplog.set_level(logging.DEBUG, logger=KAFKA_LOGGER)
    consumer = Consumer(
        with_logger(
            {
                "bootstrap.servers": f"127.0.0.1:{pick_free_port()}",
                "group.id": "unreachable",
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 20,
            }
        )
    )
    try:
        consumer.subscribe(["nothing"])
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()
    failures = [r for r in caplog.records if r.name == KAFKA_LOGGER and "Connect to" in r.message]
    assert len(failures) == 1  # tens of identical lines in 1.5 s, logged once
    assert "%3|" not in capfd.readouterr().err  # nothing written by librdkafka itself


def test_every_service_logs_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from sagacity.consumers._logging import configure

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure("INFO")
        logging.getLogger("sagacity.approvals").info("started", extra={"saga_id": "s-1"})
        logging.getLogger("uvicorn.error").info("listening")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["logger"], r["msg"]) for r in lines] == [
        ("sagacity.approvals", "started"),
        ("uvicorn.error", "listening"),
    ]
    assert lines[0]["saga_id"] == "s-1"


def test_an_error_prints_its_reason_not_only_its_message() -> None:
    """An error with a reason beyond its message (an approval refused for want of a pinned
    key) is printed whole by every command."""
    from sagacity.cli._exit import CommandError
    from sagacity.errors import ApprovalMissingError

    error = ApprovalMissingError(
        "no human approval recorded", detail="no approvals key is pinned to verify it"
    )
    assert CommandError.of(error).format_message() == (
        "no human approval recorded: no approvals key is pinned to verify it"
    )


def test_no_command_prints_only_the_message_of_an_error() -> None:
    """``exc.message`` drops an error's reason: the commands print ``str(exc)``."""
    import re

    cli = Path(__file__).resolve().parents[2] / "sagacity" / "cli"
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(cli.glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b(exc|error|bad)\.message\b", line)
    ]
    assert offenders == []


# Runs the CLI as if the [mcp] extra's SDK were not installed.
_WITHOUT_MCP = _WITHOUT_SERVICES.replace(
    'blocked = {"fastapi", "starlette", "uvicorn", "prometheus_client", "httpx", "jinja2"}',
    'blocked = {"mcp"}',
)


def test_a_missing_mcp_extra_is_one_line_and_exit_2_as_elsewhere(tmp_path: Path) -> None:
    assert _WITHOUT_MCP != _WITHOUT_SERVICES
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_MCP,
            "serve",
            "mcp",
            "--tools",
            "sagacity.demo.tools:TOOLS",
            "--bootstrap-servers",
            "127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "`sagacity serve mcp` needs the [services,mcp] extra" in lines[0]
    assert "pip install 'sagacity[services,mcp]'" in lines[0]


def test_every_variable_is_named_once_in_a_commands_help() -> None:
    """``[env var: …]`` is click's, from the option's ``envvar``: a help text that also
    names it by hand shows it twice."""
    import re

    import click

    from sagacity.cli import main

    def commands(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command]]:
        found = []
        for name, command in group.commands.items():
            found.append(([*path, name], command))
            if isinstance(command, click.Group):
                found.extend(commands(command, [*path, name]))
        return found

    twice = []
    for path, command in commands(main, []):
        for param in command.params:
            if not isinstance(param, click.Option) or not param.envvar:
                continue
            record = param.get_help_record(click.Context(command, info_name=path[-1]))
            text = " ".join(record[1].split()) if record else ""
            names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            for name in names:
                if len(re.findall(rf"\b{name}\b", text)) > 1:
                    twice.append(f"sagacity {' '.join(path)} {param.opts[0]}: {name}")
    assert twice == []


@pytest.mark.postgres
@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "--timeout", "3"],
        ["saga", "takeover", "order-1", "--reason", "host lost"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_command_on_an_unreachable_broker_prints_one_tidy_line(
    argv: list[str], pg_dsn: str
) -> None:
    """No line of librdkafka's own, no ``KafkaError{…}``: the command's one line says it."""
    env = {
        **os.environ,
        "SAGACITY_BOOTSTRAP_SERVERS": f"127.0.0.1:{pick_free_port()}",
        "SAGACITY_DATABASE_URL": pg_dsn,  # its own schema: no other key's data keys
    }
    done = subprocess.run(
        [sys.executable, "-m", "sagacity.cli", *argv],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "librdkafka" not in done.stderr
    assert "KafkaError{" not in done.stderr
