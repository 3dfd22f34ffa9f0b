"""The services: approvals, compensation and the archive, each a package of its own.

What they share (structured logging, the ``--tools`` loader) is exported here, imported on first
use so that importing one service's module loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sagacity.consumers._logging import configure as configure_logging
    from sagacity.consumers._logging import log_hot_path
    from sagacity.consumers._tools import import_tools, load_tools

# Public name → (module, attribute).
_EXPORTS = {
    "configure_logging": ("_logging", "configure"),
    "import_tools": ("_tools", "import_tools"),
    "log_hot_path": ("_logging", "log_hot_path"),
    "load_tools": ("_tools", "load_tools"),
}

__all__ = ["configure_logging", "import_tools", "load_tools", "log_hot_path"]


def __getattr__(name: str) -> object:
    found = _EXPORTS.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = found
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
