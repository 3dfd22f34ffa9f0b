"""The compiled hot path is optional (docs/adr/0013-compiled-hot-path.md): where ``cargo`` is on
the PATH but cannot build, ``deploy/local``'s install (the package, with the module built in)
falls back to the Python path with one warning instead of stopping the demo and the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.install._source import source_copy

RUSTUP = (
    "error: rustup could not choose a version of cargo to run, because one wasn't specified "
    "explicitly, and no default is configured."
)


def _lib(
    root: Path, venv: Path, env: dict[str, str], steps: str
) -> subprocess.CompletedProcess[str]:
    """Run ``steps`` in bash with ``root``'s deploy/local/lib.sh sourced and ``.venv`` at
    ``venv``."""
    script = f'set -euo pipefail; source deploy/local/lib.sh; SAGACITY_VENV="$1"; {steps}'
    return subprocess.run(
        ["bash", "-c", script, "lib", str(venv)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_cargo_that_cannot_build_falls_back_to_the_python_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text(f'#!/bin/sh\necho "{RUSTUP}" >&2\nexit 1\n')
    cargo.chmod(0o755)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # A copy: the install builds into its source tree (and removes an older module there).
    root = source_copy(tmp_path / "src")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SAGACITY_", "VIRTUAL")) and k not in ("CARGO", "CI")
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"  # the failing cargo comes first
    # The package alone: its dependencies are not what this test is about.
    env["PIP_NO_DEPS"] = "1"

    built = _lib(
        root,
        venv,
        env,
        'command -v cargo; sagacity_install; sagacity_native_check; echo "$SAGACITY_NATIVE"',
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.split() == [str(cargo), "0"]  # this cargo ran; the Python path is on
    warnings = [line for line in built.stderr.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1, built.stderr
    assert warnings[0].startswith("warning: cargo could not build the compiled hot path")
    assert RUSTUP in warnings[0]
    assert "sagacity runs in Python" in warnings[0]
    assert "0.23x" in warnings[0]  # the cost
    assert "rustup default stable" not in built.stderr  # the log keeps the rest
    assert RUSTUP in (venv / "install.log").read_text()
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sagacity, sagacity._sagacity_native"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert "No module named 'sagacity._sagacity_native'" in found.stderr  # nothing half-built

    # Later runs remember it (sagacity_venv wrote its stamp after the build): no reinstall, no
    # rebuild, one warning, the Python path again; also in a script run by one that exported
    # SAGACITY_NATIVE=0 after the failure (.ci/run, then deploy/local/test).
    (venv / ".sagacity-installed").write_text(_lib(root, venv, env, "_sagacity_want 1").stdout)
    for inherited in ({}, {"SAGACITY_NATIVE": "0"}):
        again = _lib(root, venv, {**env, **inherited}, 'sagacity_venv; echo "$SAGACITY_NATIVE"')
        assert again.returncode == 0, again.stderr
        assert again.stdout.split() == ["0"]
        assert again.stderr.count("warning:") == 1, again.stderr
        assert again.stderr.startswith("warning: cargo could not build"), again.stderr

    # SAGACITY_NATIVE=1 asks for the compiled module: then a failed build is an error.
    required = _lib(root, venv, {**env, "SAGACITY_NATIVE": "1"}, "sagacity_native_check")
    assert required.returncode == 1
    assert required.stderr.startswith("error: cargo could not build the compiled hot path")

    # So does CI where cargo is (CI=true, SAGACITY_NATIVE unset), also for a failure remembered
    # from an earlier run: a CI run never checks the Python half alone by accident.
    # SAGACITY_NATIVE=0 still chooses the Python path deliberately.
    for steps in ("sagacity_native_check", "sagacity_venv"):
        in_ci = _lib(root, venv, {**env, "CI": "true"}, steps)
        assert in_ci.returncode == 1, (steps, in_ci.stderr)
        assert in_ci.stderr.startswith("error: cargo could not build the compiled hot path")
        assert "(or CI=true) requires it" in in_ci.stderr
    chosen = _lib(
        root,
        venv,
        {**env, "CI": "true", "SAGACITY_NATIVE": "0"},
        'sagacity_native_check; echo "$SAGACITY_NATIVE"',
    )
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.split() == ["0"]
    assert chosen.stderr.startswith("warning: cargo could not build")
