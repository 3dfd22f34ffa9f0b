"""The checkout as a fresh clone has it, and virtual environments to install it into."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def source_copy(dest: Path, *, cargo_target: bool = False) -> Path:
    """The checkout's sources without build products (a stale ``build/`` or compiled module
    would leak into the wheel), as a fresh clone has them.

    ``cargo_target``: also copy cargo's ``native/target`` (its dependencies' builds), so the
    compiled module builds without compiling them again.
    """
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".sagacity",
        "target",
        "tmp",
        "*.so",
    )
    shutil.copytree(ROOT, dest, symlinks=True, ignore=skip)
    target = ROOT / "native" / "target"
    if cargo_target and target.is_dir():
        shutil.copytree(target, dest / "native" / "target", symlinks=True)
    return dest


def bare_venv(dest: Path, *, with_dependencies: bool = False) -> Path:
    """A virtual environment without a pip of its own (seeding one is the slow part; this
    process's pip installs into it with :func:`pip`); its python.

    ``with_dependencies``: it sees this environment's installed packages after its own (a
    ``.pth`` line), so a package installed with ``--no-deps`` imports.
    """
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120
    )
    python = dest / "bin" / "python"
    if with_dependencies:
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(purelib, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def pip(python: Path) -> list[str]:
    """This process's pip, installing into ``python``'s environment."""
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]


def without_cargo(env: dict[str, str], home: Path) -> dict[str, str]:
    """``env`` as on a machine without a Rust toolchain: no cargo on the PATH, and a home
    without rustup's ``~/.cargo/bin`` (pip keeps its cache where it was)."""
    cache = Path(env.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
    path = [
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "cargo").exists() and not (Path(d) / "rustc").exists()
    ]
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "PATH": os.pathsep.join(path), "HOME": str(home), "PIP_CACHE_DIR": str(cache)}
