"""The demo's child processes: the services it starts, and the commands it runs.

Every child is the same interpreter as the demo (``python -m ...``), so the demo works from
any virtual environment without ``sagacity`` on the ``PATH``.  Each writes to its own log file
in the run directory; :func:`tail` gives the last lines for error messages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SAGACITY = (sys.executable, "-m", "sagacity.cli")
"""The ``sagacity`` command, run by this interpreter."""


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file ("" when it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


@dataclass
class Service:
    """A long-running child process with a log file and an HTTP readiness URL."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log: Path
    ready_url: str
    cwd: Path
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        """The child's pid once started."""
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Start the process, its output going to :attr:`log`."""
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                list(self.argv),
                env=dict(self.env),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group: a ^C at the terminal reaches the demo, which stops it.
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit status if the process has ended, else ``None``."""
        return self.process.poll() if self.process is not None else None

    def wait_ready(self, deadline: float) -> str | None:
        """Wait until :attr:`ready_url` answers 200; ``None`` then, else why not."""
        while True:
            code = self.exited()
            if code is not None:
                return f"exited with status {code} before it was ready"
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.ready_url, timeout=2) as response,  # noqa: S310
            ):
                if response.status == 200:
                    return None
            if time.monotonic() >= deadline:
                return f"not ready at {self.ready_url} in time"
            time.sleep(0.2)

    def stop(self, grace_s: float = 10.0) -> str:
        """SIGTERM, then SIGKILL after ``grace_s``; how it ended."""
        process = self.process
        if process is None:
            return "not started"
        if process.poll() is not None:
            return f"had exited ({process.returncode})"
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=grace_s)
            return "stopped by SIGTERM" if code == -signal.SIGTERM else f"stopped (exit {code})"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            return f"killed after {grace_s:g}s"


@dataclass(frozen=True)
class Completed:
    """A finished command: exit status and output (stderr kept apart)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run_command(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path, timeout_s: float
) -> Completed:
    """Run a command to completion, appending the command and its output to ``log``.

    A command still running after ``timeout_s`` is killed and reported with status -9.
    """
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        result = Completed(tuple(argv), done.returncode, done.stdout, done.stderr)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        result = Completed(tuple(argv), -9, out, err + f"\n(killed after {timeout_s:g}s)")
    with log.open("a", encoding="utf-8") as out_file:
        out_file.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}")
        out_file.write(f"(exit {result.returncode})\n\n")
    return result
