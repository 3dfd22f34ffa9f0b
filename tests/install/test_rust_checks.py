"""``deploy/local/rust-checks``: the Rust half's formatting, lint and unit tests, run the way
``.ci/run`` runs the Python half's, with each command printed and no silent skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local" / "rust-checks"


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _env(tmp_path: Path, cargo: str | None) -> dict[str, str]:
    """A clean environment whose only cargo is ``cargo`` (a script), or none at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if cargo is not None:
        fake = bin_dir / "cargo"
        fake.write_text(cargo)
        fake.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),  # no ~/.cargo/bin to fall back to
    }


def test_it_runs_fmt_clippy_and_the_tests_in_the_crate_and_says_so(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    env = _env(tmp_path, f'#!/bin/sh\necho "$PWD: $*" >> {calls}\n')
    done = _run(env)
    assert done.returncode == 0, done.stderr
    native = ROOT / "native"
    assert calls.read_text().splitlines() == [
        f"{native}: fmt --check",
        f"{native}: clippy --all-targets -- -D warnings",
        f"{native}: test",
    ]
    printed = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert printed == [
        "+ (cd native && cargo fmt --check)",
        "+ (cd native && cargo clippy --all-targets -- -D warnings)",
        "+ (cd native && cargo test)",
    ]


def test_a_failing_check_fails_it_and_stops_there(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    env = _env(
        tmp_path, f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = clippy ] && exit 101\nexit 0\n'
    )
    done = _run(env)
    assert done.returncode == 101
    assert calls.read_text().splitlines() == ["fmt --check", "clippy --all-targets -- -D warnings"]


def test_without_cargo_it_fails_unless_the_compiled_module_is_off(tmp_path: Path) -> None:
    env = _env(tmp_path, None)
    missing = _run(env)
    assert missing.returncode == 1
    assert "no cargo" in missing.stderr
    skipped = _run({**env, "SAGACITY_NATIVE": "0"})
    assert skipped.returncode == 0
    assert "skipped: SAGACITY_NATIVE=0" in skipped.stdout
