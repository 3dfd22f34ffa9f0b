"""Schemathesis over the published OpenAPI spec: no 5xx and no contract violation.

The generated requests (valid and invalid bodies, ids, query strings, with and without
credentials) go over TCP to a running service on a real PostgreSQL working table, with one real
pending request.  Bounded (examples per operation, fixed seed) so the run stays under a minute.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TOKENS, LiveService

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_schemathesis_finds_no_server_error_and_no_contract_violation(
    live: LiveService, tmp_path: Path
) -> None:
    live.gate("t-1")
    schemathesis = Path(sys.executable).with_name("schemathesis")
    run = subprocess.run(
        [
            str(schemathesis),
            "run",
            f"{live.url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "10",
            "--seed",
            "20260101",
            "--workers",
            "1",
            "--max-time",
            "40",
            "-H",
            f"Authorization: Bearer {TOKENS['bob']}",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        cwd=tmp_path,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "Selected: 11/11" in output  # the 8 of requests and sagas, and the 3 of grants
    assert "Tested: 11" in output
