"""The benches' targets and run stamps (issue 36): a recorded figure says its load and path,
and a target counts only when the median and every run meet it."""

from __future__ import annotations

import re

import pytest

from bench._runinfo import Stamp, path
from bench.journal_bench import _targets


def test_latency_targets_hold_on_every_run() -> None:
    _, p50 = _targets("journal", "p50")
    assert p50([1.10, 1.12, 1.15])
    assert not p50([1.05, 1.10, 1.16])  # median met, one run above: missed


def test_crowd_targets_need_the_median_and_no_run_below_half() -> None:
    _, clear = _targets("journal", "256")
    _, sealed = _targets("sealed", "256")
    assert clear([0.79, 0.8, 0.9])
    assert not clear([0.7, 0.79, 0.9])
    assert sealed([0.55, 0.6, 0.7])
    assert not sealed([0.49, 0.65, 0.7])


def test_a_stamp_names_its_load_at_both_ends_and_its_path() -> None:
    line = Stamp().line()
    assert re.match(r"Run \d{4}-\d\d-\d\d \d\d:\d\d UTC to \d\d:\d\d UTC; ", line)
    assert line.count("(1 / 5 / 15 min)") == 2
    assert "hot paths: compiled" in line or "hot paths: Python (" in line


def test_the_python_path_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGACITY_NATIVE", "0")
    assert path() == "Python (SAGACITY_NATIVE=0 turns the compiled module off)"
