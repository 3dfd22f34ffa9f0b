"""Topics the tests make: ready once the broker's metadata holds them."""

from __future__ import annotations

import time
from typing import Any


def wait_for_topic(admin: Any, name: str, partitions: int, within_s: float = 30.0) -> None:
    """Wait until the broker's metadata shows topic ``name`` with ``partitions`` partitions,
    each with a leader: a created topic reaches the broker's metadata a moment after the
    controller acknowledges its creation, and a client asking in between is told it does not
    exist."""
    deadline = time.monotonic() + within_s
    while True:
        info = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            info is not None
            and info.error is None
            and len(info.partitions) == partitions
            and all(p.leader >= 0 for p in info.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} not in the broker's metadata after {within_s}s")
        time.sleep(0.05)
