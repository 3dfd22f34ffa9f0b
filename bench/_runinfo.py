"""What every recorded figure says about its run: when, under what load, on which path.

The benches run on a shared machine, so a figure is read with the load it ran under (the
1, 5 and 15 minute load averages at its start and at its end) and the path it ran (the
compiled module or the Python twins, docs/adr/0013-compiled-hot-path.md).
"""

from __future__ import annotations

import datetime as dt
import os

from sagacity._native import path_in_use


def now() -> str:
    """The current time, as the docs write it (``2026-12-05 23:40 UTC``)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def load() -> str:
    """The 1, 5 and 15 minute load averages and the CPUs they are shared by."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def path() -> str:
    """Which hot path this process runs: ``compiled (…)`` or ``Python (…)``."""
    compiled, line = path_in_use()
    if compiled:
        return "compiled (`sagacity._sagacity_native`)"
    return "Python (" + line.removeprefix("hot paths: Python (").split(")", 1)[0] + ")"


class Stamp:
    """The start of a run (time and load); :meth:`line` adds the end's load and the path."""

    def __init__(self) -> None:
        self.began = now()
        self.load_before = load()

    def line(self) -> str:
        """``Run <start> to <end>; load average at the start …, at the end …; hot paths: …``."""
        return (
            f"Run {self.began} to {now()[11:]}; load average at the start {self.load_before}, "
            f"at the end {load()}; hot paths: {path()}."
        )
