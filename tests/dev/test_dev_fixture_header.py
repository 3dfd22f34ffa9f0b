"""The test session's header names where Kafka and PostgreSQL come from and why (the fixture
precedence of docs/adr/0009-dev-stack.md: variables, testcontainers, the local stack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIABLES = ("SAGACITY_BOOTSTRAP_SERVERS", "SAGACITY_DATABASE_URL")


def _header(**env: str) -> list[str]:
    """The ``infrastructure`` lines of a collect-only session's header under ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES and k != "DOCKER_HOST"}
    # Without the other plugins (schemathesis, hypothesis …) collection takes a second.
    base["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider"),
            *("-p", "pytest_timeout", "tests/core/test_public_api.py"),
        ],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("infrastructure ")]


class _FakeEngine(BaseHTTPRequestHandler):
    """Answers a Docker client's version query and ping, as an engine does."""

    def do_GET(self) -> None:
        body = (
            json.dumps({"ApiVersion": "1.44", "Version": "25.0.0"}).encode()
            if self.path.endswith("/version")
            else b"OK"
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if body != b"OK" else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def docker_engine() -> Iterator[str]:
    """``DOCKER_HOST`` of something that answers like a Docker engine (nothing more)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_header_names_the_variables_when_they_are_set() -> None:
    lines = _header(
        SAGACITY_BOOTSTRAP_SERVERS="127.0.0.1:1",
        SAGACITY_DATABASE_URL="postgresql://u:secret@127.0.0.1:2/db",
        DOCKER_HOST="unix:///nonexistent/docker.sock",
    )
    assert lines == [
        "infrastructure kafka: 127.0.0.1:1 (SAGACITY_BOOTSTRAP_SERVERS is set)",
        "infrastructure postgres: postgresql://u:***@127.0.0.1:2/db (SAGACITY_DATABASE_URL is set)",
    ]


def test_without_variables_or_docker_the_header_names_the_local_stack() -> None:
    lines = _header(DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert len(lines) == 2
    for line, variable in zip(lines, VARIABLES, strict=True):
        assert "the checkout's local stack" in line
        assert f"{variable} is not set and no Docker engine answers" in line


def test_without_variables_and_with_docker_the_header_names_testcontainers(
    docker_engine: str,
) -> None:
    lines = _header(SAGACITY_DATABASE_URL="postgresql://127.0.0.1:2/db", DOCKER_HOST=docker_engine)
    assert lines == [
        "infrastructure kafka: testcontainers (confluentinc/cp-kafka:7.9.0)"
        " (SAGACITY_BOOTSTRAP_SERVERS is not set and a Docker engine answers)",
        "infrastructure postgres: postgresql://127.0.0.1:2/db (SAGACITY_DATABASE_URL is set)",
    ]
