"""Every service says, as it starts serving, which hot path it runs: compiled or Python
(docs/adr/0013-compiled-hot-path.md) — one ``sagacity.native`` line, after its start-up checks
(whose failures stay one line: tests/cli/test_cli_failures.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity._native import COST, path_in_use

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]

# The command as the CLI runs it, with its blocking serve call replaced by one line saying it
# was reached.
_SERVE_THEN_STOP = """
import sys
import uvicorn
uvicorn.run = lambda *a, **k: print("SERVING", file=sys.stderr)
uvicorn.Server.run = lambda self, *a, **k: print("SERVING", file=sys.stderr)
from sagacity.consumers.archive import ArchiveService
ArchiveService.run = lambda self: print("SERVING", file=sys.stderr)
from sagacity.consumers.compensation import CompensationService
CompensationService.run = lambda self: print("SERVING", file=sys.stderr)
from sagacity.adapters.mcp import SagacityMCP
SagacityMCP.run_stdio = lambda self, *a, **k: print("SERVING", file=sys.stderr)
from sagacity.cli import main
main(sys.argv[1:], prog_name="sagacity")
"""

TOOLS = ["--tools", "tests.approvals.tools:Bank"]
SERVICES = {
    "approvals": ["--insecure-dev"],
    "archive": [],
    "compensation": TOOLS,
    "mcp": TOOLS,
}


def _started(service: str, topic: str, dsn: str, bootstrap: str, **env: str) -> list[str]:
    """The service's stderr lines up to where it would serve."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _SERVE_THEN_STOP,
            "serve",
            service,
            "--topic",
            topic,
            *SERVICES[service],
        ],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")},
            "SAGACITY_BOOTSTRAP_SERVERS": bootstrap,
            "SAGACITY_DATABASE_URL": dsn,
            # What is measured here is the start-up line, not the data's sealing.
            "SAGACITY_ALLOW_CLEAR_DATA": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == "SERVING", done.stderr
    return lines


def _native_lines(lines: list[str]) -> list[dict[str, str]]:
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r for r in records if r["logger"] == "sagacity.native"]


@pytest.mark.slow
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_service_says_which_hot_path_it_runs_as_it_starts(
    service: str, make_topic: Callable[..., str], pg_dsn: str, kafka_bootstrap: str
) -> None:
    lines = _started(service, make_topic(partitions=2), pg_dsn, kafka_bootstrap)
    compiled, said = path_in_use()
    (line,) = _native_lines(lines)
    assert line["msg"] == said
    assert line["level"] == ("INFO" if compiled else "WARNING")


@pytest.mark.slow
def test_on_the_python_path_the_line_is_a_warning_naming_the_cost(
    make_topic: Callable[..., str], pg_dsn: str, kafka_bootstrap: str
) -> None:
    lines = _started(
        "approvals", make_topic(partitions=2), pg_dsn, kafka_bootstrap, SAGACITY_NATIVE="0"
    )
    (line,) = _native_lines(lines)
    assert line["level"] == "WARNING"
    assert (
        line["msg"]
        == f"hot paths: Python (SAGACITY_NATIVE=0 turns the compiled module off): {COST}"
    )
