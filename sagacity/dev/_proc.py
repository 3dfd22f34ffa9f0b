"""Process helpers: liveness by pid, graceful stop, log tails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

# Server processes this interpreter launched, by pid. Held here rather than on a server object
# so a launched server may outlive the object (``sagacity dev up`` returns while it runs) and is
# still waited for (reaped) by whichever object stops it.
launched: dict[int, subprocess.Popen[bytes]] = {}

T = TypeVar("T")


def read_state(path: Path, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """The JSON state recorded at ``path``, parsed by ``parse``.

    ``None`` when there is none or it is unreadable (``parse`` raising ``KeyError``,
    ``TypeError`` or ``ValueError`` on junk counts as unreadable).
    """
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Record ``state`` at ``path`` as indented JSON, for :func:`read_state`."""
    path.write_text(json.dumps(state, indent=2) + "\n")


def pid_alive(pid: int | None, *, marker: str | None = None) -> bool:
    """Whether process ``pid`` runs (not a zombie) and, if given, its command line has ``marker``.

    The marker guards against a recycled pid: a stale state file must never make us adopt (or
    stop) an unrelated process.
    """
    if not pid or pid <= 0:
        return False
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    # Field 3 of /proc/<pid>/stat, after the parenthesised command name, is the state.
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state in {"Z", "X"}:
        return False
    child = launched.get(pid)
    if child is not None and child.poll() is not None:
        return False
    return marker is None or marker in cmdline


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; return whether it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        _reap(pid)
        time.sleep(0.1)
    return not pid_alive(pid)


def _reap(pid: int) -> None:
    # Our own children stay zombies until waited for; reap them so they count as gone.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pid: int, *, timeout: float = 30.0, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to ``pid``, wait up to ``timeout`` seconds, then SIGKILL it.

    Returns whether the process stopped on the first signal (a clean stop).
    """
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    if wait_gone(pid, timeout):
        forget(pid)
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    wait_gone(pid, 10.0)
    forget(pid)
    return False


def forget(pid: int) -> None:
    """Wait for a launched child that has exited (or is about to) and drop it."""
    child = launched.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5.0)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of the text file at ``path`` ("" if it does not exist)."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
