"""Run ``sagacity serve approvals`` replicas as separate OS processes for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sagacity.dev import pick_free_port

REPO = Path(__file__).resolve().parents[2]


class Replica:
    """One service process; ``url`` is its base URL."""

    def __init__(self, env: dict[str, str], args: list[str], log: Path) -> None:
        self.port = pick_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("ab")
        command = [
            sys.executable,
            "-c",
            "from sagacity.cli import main; main()",
            "serve",
            "approvals",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            *args,
        ]
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.logfile = log

    def wait_ready(self, timeout: float = 30.0, *, partitions: bool = True) -> None:
        """Wait until ``/healthz`` answers (and the replica folds partitions)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"replica exited: {self.logfile.read_text()[-3000:]}")
            try:
                health = httpx.get(f"{self.url}/healthz", timeout=2)
                if health.status_code == 200 and (
                    not partitions or health.json().get("partitions")
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica not ready: {self.logfile.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()
