"""One page of the documentation, run as a reader would: its blocks in order, in one shell.

Shell blocks run in one ``bash`` session (``set -euo pipefail``; what one block exports or
starts in the background, the next sees), each sourced from a file with stdin closed. Python
blocks run in this process, in one namespace per page, with the environment and working
directory the shell had after the block before. A ``<!-- file: PATH -->`` block is written to
PATH. Everything the page started is stopped at the end (the shell is a process group of its
own: SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, NoReturn

from tests.docs._blocks import Block, blocks

BLOCK_TIMEOUT_S = 240.0


class PageRun:
    """Runs ``page``'s blocks in ``workdir`` with ``env``.

    Args:
        substitutions: text replaced in every block before it runs, each of which must occur
            in the page (a run that differs from the page says how, and stays honest).
    """

    def __init__(
        self,
        page: str,
        workdir: Path,
        env: Mapping[str, str],
        *,
        substitutions: Mapping[str, str] | None = None,
    ) -> None:
        self.page = page
        self.workdir = workdir
        self.control = workdir.parent / f"{workdir.name}.control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.control / "shell.log"
        self.env = dict(env)
        self.cwd = workdir
        self.substitutions = dict(substitutions or {})
        self.namespace: dict[str, Any] = {"__name__": f"docs_{Path(page).stem}"}
        self.timings: list[tuple[str, float]] = []
        self._shell: subprocess.Popen[str] | None = None
        self._count = 0

    # -- the page --------------------------------------------------------------------------
    def run(self) -> None:
        """Run every block of the page that runs; raise AssertionError naming the first that
        fails, with its output and the tails of the logs in the working directory."""
        found = blocks(self.page)
        text = "\n".join(b.text for b in found)
        for old in self.substitutions:
            assert old in text, f"{self.page} no longer holds {old!r}: update the substitution"
        try:
            for block in found:
                began = time.monotonic()
                if block.marker == "file":
                    self._write(block)
                elif block.runs and block.shell:
                    self._shell_block(block)
                elif block.runs and block.python:
                    self._python_block(block)
                else:
                    continue
                self.timings.append((block.where, time.monotonic() - began))
        finally:
            self.close()

    def _text(self, block: Block) -> str:
        text = block.text
        for old, new in self.substitutions.items():
            text = text.replace(old, new)
        return text

    def _write(self, block: Block) -> None:
        path = self.cwd / block.value
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self._text(block), encoding="utf-8")

    # -- shell blocks ----------------------------------------------------------------------
    def _start_shell(self) -> subprocess.Popen[str]:
        if self._shell is None:
            out = self.log.open("a", encoding="utf-8")
            self._shell = subprocess.Popen(
                ["bash", "--noprofile", "--norc"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env,
                text=True,
                start_new_session=True,
            )
            out.close()
            self._send("set -euo pipefail\n")
        return self._shell

    def _send(self, text: str) -> None:
        assert self._shell is not None
        assert self._shell.stdin is not None
        self._shell.stdin.write(text)
        self._shell.stdin.flush()

    def _shell_block(self, block: Block) -> None:
        shell = self._start_shell()
        self._count += 1
        script = self.control / f"block-{self._count}.sh"
        script.write_text(self._text(block), encoding="utf-8")
        env_file = self.control / f"block-{self._count}.env"
        done = self.control / f"block-{self._count}.done"
        start = self.log.stat().st_size if self.log.exists() else 0
        self._send(
            f"printf '\\n### %s\\n' {block.where!r}\n"
            f"source {script} </dev/null\n"
            f"env -0 > {env_file}; pwd > {done}.tmp; mv {done}.tmp {done}\n"
        )
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while not done.exists():
            if shell.poll() is not None:
                why = f"the shell exited with status {shell.returncode}"
                self._fail(block, why, self._shell_output(start))
            if time.monotonic() > deadline:
                why = f"still running after {BLOCK_TIMEOUT_S:g} s"
                self._fail(block, why, self._shell_output(start))
            time.sleep(0.05)
        self.cwd = Path(done.read_text(encoding="utf-8").strip())
        self.env = dict(
            item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item
        )

    def _shell_output(self, start: int) -> str:
        with self.log.open(encoding="utf-8", errors="replace") as log:
            log.seek(start)
            return log.read()[-6000:]

    def _fail(self, block: Block, why: str, output: str) -> NoReturn:
        logs = []
        for path in sorted(self.workdir.rglob("*.log")):
            tail = path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
            name = path.relative_to(self.workdir)
            logs.append(f"--- {name} (last lines) ---\n" + "\n".join(tail))
        raise AssertionError(
            f"{block.where}: {why}\n--- the block ---\n{self._text(block)}"
            f"--- its output ---\n{output}\n" + "\n".join(logs)
        )

    # -- Python blocks ---------------------------------------------------------------------
    def _python_block(self, block: Block) -> None:
        code = compile(self._text(block), f"{block.where} (python block)", "exec")
        out = _python_output()
        start = out.tell()
        try:
            with (
                self._as_the_shell(),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(out),
            ):
                print(f"\n### {block.where}", flush=True)
                exec(code, self.namespace)  # the documentation's own example
        except Exception as exc:
            out.flush()
            out.seek(start)
            output = out.read()
            self._fail(block, f"{type(exc).__name__}: {exc}", output[-6000:])
        finally:
            out.seek(0, os.SEEK_END)

    @contextlib.contextmanager
    def _as_the_shell(self) -> Iterator[None]:
        """This process with the shell's environment and working directory."""
        saved_env, saved_cwd = dict(os.environ), Path.cwd()
        os.environ.clear()
        os.environ.update(self.env)
        os.chdir(self.cwd)
        try:
            yield
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the shell and everything it started (its process group)."""
        shell, self._shell = self._shell, None
        if shell is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            assert shell.stdin is not None
            shell.stdin.close()
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(shell.pid):
                shell.poll()  # the shell reaped: a zombie leader would count as alive
                time.sleep(0.1)
            if not _group_alive(shell.pid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(timeout=5)


_OUTPUT: list[IO[str]] = []


def _python_output() -> IO[str]:
    """Where Python blocks print: one real file for the whole session, never closed, since a
    library may keep the ``sys.stderr`` it saw at import (the MCP SDK's stdio client does,
    and hands it to the server it starts as its stderr)."""
    if not _OUTPUT:
        _OUTPUT.append(
            tempfile.NamedTemporaryFile(  # noqa: SIM115 - open for the session, on purpose
                "a+", encoding="utf-8", prefix="sagacity-docs-python-", suffix=".log", delete=False
            )
        )
    return _OUTPUT[0]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
