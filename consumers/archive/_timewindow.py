"""The event times the archive accepts: within a skew of its own clock, so that no writer can
make it create partitions for months of its choosing (docs/adr/0006, "Partitioning")."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_MAX_FUTURE_S = 86_400.0
"""How far ahead of the archiver's clock an event may be dated: one day."""
DEFAULT_MAX_AGE_S = 2 * 366 * 86_400.0
"""How far behind it: two years (raise it to archive an older topic)."""


@dataclass(frozen=True, kw_only=True)
class TimeWindow:
    """Event times from ``now - max_age_s`` to ``now + max_future_s`` on ``clock``.

    A monthly partition is only ever created for a month this window reaches, so a hostile
    writer can make at most ``max_age_s / month + 2`` of them, however many dates it invents;
    an event outside the window is quarantined (``time_out_of_range``), never partitioned.
    """

    max_future_s: float = DEFAULT_MAX_FUTURE_S
    max_age_s: float = DEFAULT_MAX_AGE_S
    clock: Callable[[], float] = field(default=time.time)

    def __post_init__(self) -> None:
        if self.max_future_s < 0 or self.max_age_s < 0:
            raise ValueError("the time window's bounds must not be negative")

    def refusal(self, recorded_at_us: int) -> str | None:
        """Why an event dated ``recorded_at_us`` is outside the window (``None``: inside)."""
        now_us = int(self.clock() * 1_000_000)
        latest = now_us + int(self.max_future_s * 1_000_000)
        earliest = now_us - int(self.max_age_s * 1_000_000)
        if recorded_at_us > latest:
            return (
                f"event time {recorded_at_us} us is more than {self.max_future_s:g} s ahead of "
                f"the archiver's clock ({now_us} us)"
            )
        if recorded_at_us < earliest:
            return (
                f"event time {recorded_at_us} us is more than {self.max_age_s:g} s behind the "
                f"archiver's clock ({now_us} us)"
            )
        return None
