"""The compiled module ships with the package (docs/adr/0013-compiled-hot-path.md): ``pip wheel``
and ``pip install`` build it in where a Rust toolchain is, and install without it, saying so
in one line, where none is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.install._source import bare_venv, pip, source_copy, without_cargo

NOT_BUILT = "warning: sagacity._sagacity_native (the compiled hot path, native/) is not built"

# Run in the installed environment: which path it runs, and an event linked on it agrees with
# the reference (chain.link + encode_entry).
_PROBE = """
import json, sagacity, sagacity._native as n
from sagacity import EntryDraft, EventType
from sagacity.chain import GENESIS_HASH, link
from sagacity.schemas import encode_entry, link_encoded
from sagacity.schemas import _hotpath
draft = EntryDraft(saga_id="s-1", event_type=EventType.INTENT, actor="a", tool="t", payload="{}")
entry, value = link_encoded(draft, seq=1, prev_hash=GENESIS_HASH)
reference = link(draft, seq=1, prev_hash=GENESIS_HASH)
print(json.dumps({"file": sagacity.__file__, "said": n.path_in_use()[1], "codec": _hotpath.NATIVE,
                  "same": entry == reference and value == encode_entry(reference)}))
"""


def _cargo_here() -> bool:
    """Whether this machine has cargo where the build looks for it (and it is not off)."""
    found = shutil.which("cargo") or (Path.home() / ".cargo" / "bin" / "cargo").exists()
    return bool(found) and os.environ.get("SAGACITY_NATIVE", "1") != "0"


def _probe(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    import json

    done = subprocess.run(
        [str(python), "-I", "-c", _PROBE],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return out


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "VIRTUAL"))}


@pytest.mark.slow
def test_the_wheel_holds_the_compiled_module_where_cargo_is(tmp_path: Path) -> None:
    source = source_copy(tmp_path / "src", cargo_target=True)
    env = _env()
    if os.environ.get("SAGACITY_NATIVE") == "0":
        env["SAGACITY_NATIVE"] = "0"  # a run that turned it off builds the pure wheel
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), "."],
        capture_output=True,
        text=True,
        cwd=source,
        env=env,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = tmp_path.glob("sagacity-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    compiled = [n for n in names if n.startswith("sagacity/_sagacity_native.")]
    if _cargo_here():
        assert compiled == ["sagacity/_sagacity_native.abi3.so"], wheel.name
        # abi3: one wheel for every CPython >= 3.11 on this platform.
        assert "-cp311-abi3-" in wheel.name
        assert NOT_BUILT not in built.stdout + built.stderr
    else:
        assert compiled == []
        assert wheel.name.endswith("-py3-none-any.whl")
        return

    python = bare_venv(tmp_path / "venv", with_dependencies=True)
    install = [*pip(python), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, timeout=300, capture_output=True)
    probe = _probe(python, tmp_path, _env())
    assert str(probe["file"]).startswith(str(tmp_path / "venv")), probe  # the wheel's
    assert probe == {
        "file": probe["file"],
        "said": "hot paths: compiled (sagacity._sagacity_native)",
        "codec": True,
        "same": True,
    }


@pytest.mark.slow
def test_an_install_without_cargo_says_so_once_and_runs_the_python_path(tmp_path: Path) -> None:
    source = source_copy(tmp_path / "src")
    python = bare_venv(tmp_path / "venv", with_dependencies=True)
    env = without_cargo(_env(), tmp_path / "home")
    assert shutil.which("cargo", path=env["PATH"]) is None
    install = subprocess.run(
        [*pip(python), "install", "-v", "--no-deps", str(source)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    output = install.stdout + install.stderr
    assert install.returncode == 0, output[-3000:]
    said = [line.strip() for line in output.splitlines() if NOT_BUILT in line]
    assert len(said) == 1, said  # once, not once per build hook
    assert said[0].startswith(f"{NOT_BUILT}: no Rust toolchain (cargo is not on the PATH);")
    assert "0.23x" in said[0]  # it names the cost
    assert "Successfully installed sagacity" in output

    probe = _probe(python, tmp_path, env)
    assert str(probe["file"]).startswith(str(tmp_path / "venv")), probe
    assert probe["said"] == (
        "hot paths: Python (the compiled module sagacity._sagacity_native is not installed: "
        "this install was built without a Rust toolchain): " + _cost()
    )
    assert (probe["codec"], probe["same"]) == (False, True)


def _cost() -> str:
    from sagacity._native import COST

    return COST
