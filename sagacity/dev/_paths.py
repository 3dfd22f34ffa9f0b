"""Where the local stack keeps its state and its download cache."""

from __future__ import annotations

import os
from pathlib import Path


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: the working directory) holding a
    ``pyproject.toml``; ``start`` itself when there is none."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file():
            return directory
    return here


def dev_home() -> Path:
    """The state directory of this checkout's stack: ``SAGACITY_DEV_HOME`` or
    ``<project root>/.sagacity/dev``."""
    explicit = os.environ.get("SAGACITY_DEV_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    return project_root() / ".sagacity" / "dev"


def cache_dir() -> Path:
    """The download cache shared by every checkout: ``SAGACITY_CACHE_DIR`` or
    ``$XDG_CACHE_HOME/sagacity`` (``~/.cache/sagacity``)."""
    explicit = os.environ.get("SAGACITY_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "sagacity"
