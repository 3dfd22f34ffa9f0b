"""Named points where a test can hold the service still, to kill it there.

``SAGACITY_COMPENSATION_FAILPOINT=<point>:<n>`` and ``SAGACITY_COMPENSATION_FAILPOINT_FILE``
make the n-th arrival (1-based) at ``point`` write the file and then sleep until the process is
killed.  Unset (production), :func:`reach` only counts.  Points, in the order a step meets
them: ``after_intent``, ``after_claim``, ``after_call``, ``after_record``, ``after_outcome``,
``after_end`` (the saga's ``SAGA_ENDED`` is journaled, its offset not yet committed).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

POINTS = (
    "after_intent",
    "after_claim",
    "after_call",
    "after_record",
    "after_outcome",
    "after_end",
)

_lock = threading.Lock()
_counts: dict[str, int] = {}


def _armed() -> tuple[str, int, Path] | None:
    spec = os.environ.get("SAGACITY_COMPENSATION_FAILPOINT")
    marker = os.environ.get("SAGACITY_COMPENSATION_FAILPOINT_FILE")
    if not spec or not marker:
        return None
    point, _, count = spec.partition(":")
    return point, int(count or "1"), Path(marker)


def reach(point: str) -> None:
    """Note that the service reached ``point``; hold forever there if a test armed it."""
    armed = _armed()
    if armed is None or armed[0] != point:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        hit = _counts[point] == armed[1]
    if hit:
        armed[2].write_text(point)
        while True:  # the test kills the process here
            time.sleep(3600)
