"""The optional compiled module (``native/``, package ``sagacity-native``; ADR 0013).

One place decides whether it is used: installed, and not turned off with
``SAGACITY_NATIVE=0``.  Every compiled function has a Python twin that agrees byte for byte
(the conformance vectors), so ``None`` here only means the slower path.
"""

from __future__ import annotations

import importlib
import os
from typing import Any


def native(name: str) -> Any | None:
    """``sagacity_native.<name>``, or ``None`` when the module is not installed, lacks it (an
    older build), or ``SAGACITY_NATIVE=0``."""
    if os.environ.get("SAGACITY_NATIVE", "1") == "0":
        return None
    try:
        module = importlib.import_module("sagacity_native")
    except ImportError:
        return None
    return getattr(module, name, None)
