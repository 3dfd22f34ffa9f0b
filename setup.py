"""The compiled module ``sagacity._sagacity_native`` (``native/``, Rust) in this distribution.

Everything else of the build is declared in ``pyproject.toml``; this file only decides whether
the extension is built (docs/adr/0013-compiled-hot-path.md):

- where a Rust toolchain is (``cargo`` on the PATH, or where rustup puts it: ``~/.cargo/bin``)
  it is built by setuptools-rust and ships in the wheel;
- where none is, or cargo cannot build it, the install still succeeds, pure Python, and the
  build prints one line saying so and what it costs (``pip install -v`` shows it);
- ``SAGACITY_NATIVE=0`` skips it; ``SAGACITY_NATIVE=1`` requires it (the build fails instead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from setuptools import setup

WARNING = "warning: sagacity._sagacity_native (the compiled hot path, native/) is not built"
COST = (
    "sagacity runs its Python paths: correct, slower (verify about 0.23x and archive ingest "
    "0.5x of their ceilings instead of 0.63x and 0.89x; a slower journal; docs/performance.md)"
)


# The commands that build; the build backend also runs this file for metadata (egg_info,
# dist_info), which must not repeat the warning.
_BUILDS = {"bdist_wheel", "build", "build_ext", "build_rust", "editable_wheel", "develop"}


def _say_not_built(cause: str) -> None:
    if _BUILDS.intersection(sys.argv[1:]):
        print(f"{WARNING}: {cause}; {COST}", file=sys.stderr, flush=True)


def _toolchain() -> str | None:
    """Why no usable Rust toolchain is here (``None``: there is one, on this process's PATH)."""
    if shutil.which("cargo") is None:
        rustup = Path.home() / ".cargo" / "bin"
        if not (rustup / "cargo").exists():
            return "no Rust toolchain (cargo is not on the PATH)"
        os.environ["PATH"] = f"{rustup}{os.pathsep}{os.environ.get('PATH', '')}"
    for tool in ("cargo", "rustc"):
        try:
            probe = subprocess.run(
                [tool, "--version"], capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{tool} --version failed: {exc}"
        if probe.returncode != 0:
            said = [line.strip() for line in probe.stderr.splitlines() if line.strip()]
            return f"{tool} --version failed: {said[0] if said else probe.returncode}"
    return None


def _native_extension() -> dict[str, Any]:
    """The ``setup()`` arguments that build the extension, or none."""
    wanted = os.environ.get("SAGACITY_NATIVE", "")
    if wanted == "0":
        _say_not_built("SAGACITY_NATIVE=0")
        return {}
    missing = _toolchain()
    if missing is not None:
        if wanted == "1":
            raise SystemExit(f"error: SAGACITY_NATIVE=1 requires the compiled module: {missing}")
        _say_not_built(missing)
        return {}
    from setuptools_rust import Binding, RustExtension, build_rust

    class BuildNative(build_rust):  # type: ignore[misc]
        """setuptools-rust's build, with an optional extension's failure said in one line."""

        def run_for_extension(self, ext: RustExtension) -> None:
            try:
                super().run_for_extension(ext)
            except Exception as exc:
                if not ext.optional:
                    raise
                # cargo's output (captured: quiet) indented as a log, then the one line.
                lines = [line.rstrip() for line in str(exc).splitlines() if line.strip()]
                print("\n".join(f"    {line}" for line in lines), file=sys.stderr)
                errors = [line.strip() for line in lines if line.lstrip().startswith("error")]
                cause = (errors or lines or ["no output"])[0]
                _say_not_built(f"cargo failed: {cause[:300]}")
                # Nothing compiled is in it: a pure wheel (py3-none-any), as without cargo.
                self.distribution.has_ext_modules = lambda: False
                wheel = self.distribution.command_obj.get("bdist_wheel")
                if wheel is not None:
                    wheel.root_is_pure = True

    extension = RustExtension(
        # Inside the package (one import root, docs/adr/0001-layout.md), where an editable
        # install finds it too.
        "sagacity._sagacity_native",
        path="native/Cargo.toml",
        binding=Binding.PyO3,
        py_limited_api="auto",
        optional=wanted != "1",
        # cargo's output is kept for the exception: a failure is said in one line (above).
        quiet=True,
        # cargo's own build profile (native/Cargo.toml: release, LTO), as maturin built it.
        debug=False,
    )
    return {
        "rust_extensions": [extension],
        "cmdclass": {"build_rust": BuildNative},
        # abi3 (pyo3's abi3-py311 feature): one wheel serves every CPython >= 3.11.
        "options": {"bdist_wheel": {"py_limited_api": "cp311"}},
        "zip_safe": False,
    }


setup(**_native_extension())
