"""``sagacity topic create`` / ``check`` against a real broker."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from sagacity.cli import main
from sagacity.producer import KafkaJournal

pytestmark = pytest.mark.kafka


@pytest.fixture
def fresh_name(kafka_bootstrap: str) -> Iterator[str]:
    name = f"cli.{uuid.uuid4().hex[:12]}"
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name], operation_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


def test_create_then_check_is_clean(kafka_bootstrap: str, fresh_name: str) -> None:
    runner = CliRunner()
    args = ["--bootstrap-servers", kafka_bootstrap, "--topic", fresh_name]
    created = runner.invoke(main, ["topic", "create", *args, "--partitions", "4"])
    assert created.exit_code == 0, created.output
    assert "4 partitions" in created.output
    assert "cleanup.policy delete" in created.output
    checked = runner.invoke(main, ["topic", "check", *args, "--json"])
    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.output)
    assert report["ok"] is True
    assert report["partitions"] == 4
    settings = {f["setting"]: f["value"] for f in report["findings"]}
    assert settings["cleanup.policy"] == "delete"
    assert settings["retention.ms"] == str(400 * 24 * 3600 * 1000)
    again = runner.invoke(main, ["topic", "create", *args])
    assert again.exit_code == 1
    assert "already exists" in again.output
    init = runner.invoke(main, ["topic", "create", *args, "--exist-ok"])  # a deployment's init
    assert init.exit_code == 0, init.output
    assert f"{fresh_name} exists already (4 partitions)" in init.output
    journal = KafkaJournal(kafka_bootstrap, topic=fresh_name)
    assert journal.topic_info.partitions == 4
    journal.close()


def test_check_reports_compaction_as_fatal(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1, config={"cleanup.policy": "compact"})
    result = CliRunner().invoke(
        main, ["topic", "check", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    )
    assert result.exit_code == 1
    assert "FATAL" in result.output
    assert "erase" in result.output


def test_check_of_a_missing_topic_names_create(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(
        main,
        ["topic", "check", "--bootstrap-servers", kafka_bootstrap, "--topic", "absent.topic"],
    )
    assert result.exit_code == 2  # the command cannot run: what it checks is not there
    assert "sagacity topic create" in result.output


def test_create_with_infinite_retention(kafka_bootstrap: str, fresh_name: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "topic",
            "create",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            fresh_name,
            "--partitions",
            "1",
            "--retention",
            "infinite",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "retention.ms -1" in result.output


@pytest.mark.parametrize("command", ["check", "create"])
def test_an_unreachable_broker_is_one_line_and_exit_3_within_10_seconds(command: str) -> None:
    """As the services say it: within 10 s, one line naming the brokers, no KafkaError{…}."""
    import subprocess
    import sys
    import time

    from sagacity.dev import pick_free_port

    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sagacity.cli",
            "topic",
            command,
            "--bootstrap-servers",
            f"127.0.0.1:{pick_free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - began
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "is unreachable: no answer within" in lines[0]
    assert "KafkaError{" not in lines[0]
    assert took <= 10, took
