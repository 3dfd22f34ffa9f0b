"""The compiled module ``sagacity._sagacity_native`` (``native/``, Rust; ADR 0013).

It is built into the ``sagacity`` distribution where a Rust toolchain is (``setup.py``) and
left out where none is.  One place decides whether it is used: installed, and not turned off
with ``SAGACITY_NATIVE=0``.  Every compiled function has a Python twin that agrees byte for
byte (the conformance vectors), so ``None`` here only means the slower path.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

MODULE = "sagacity._sagacity_native"
"""The compiled module's import name."""

COST = (
    "verify runs at about 0.23x of its ceiling instead of 0.63x, archive ingest at 0.50x "
    "instead of 0.89x, and the journal links and encodes each event in Python "
    "(docs/performance.md)"
)
"""What running without the compiled module costs, in the words the warnings use."""


def _module() -> Any | None:
    if os.environ.get("SAGACITY_NATIVE", "1") == "0":
        return None
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        return None


def native(name: str) -> Any | None:
    """``sagacity._sagacity_native.<name>``, or ``None`` when the module is not installed,
    lacks it (an older build), or ``SAGACITY_NATIVE=0``."""
    module = _module()
    return None if module is None else getattr(module, name, None)


def path_in_use() -> tuple[bool, str]:
    """Whether the compiled path runs, and one line saying which path and why."""
    if os.environ.get("SAGACITY_NATIVE", "1") == "0":
        return False, f"hot paths: Python (SAGACITY_NATIVE=0 turns the compiled module off): {COST}"
    if _module() is None:
        return False, (
            f"hot paths: Python (the compiled module {MODULE} is not installed: this install "
            f"was built without a Rust toolchain): {COST}"
        )
    return True, f"hot paths: compiled ({MODULE})"


log = logging.getLogger("sagacity.native")


def log_path_in_use() -> None:
    """Log which path this process runs (``sagacity.native``): compiled (info), or Python (a
    warning naming the cost).  Each service does so once, as it starts serving (after its
    start-up checks, whose failures stay one line)."""
    compiled, line = path_in_use()
    log.log(logging.INFO if compiled else logging.WARNING, line)
