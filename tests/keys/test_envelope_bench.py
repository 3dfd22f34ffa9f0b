"""The envelope bench runs on the real broker and database and reports its ratio."""

from __future__ import annotations

import re

import pytest

from bench import envelope_bench

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def test_the_quick_bench_measures_both_sides_in_one_run(
    kafka_bootstrap: str, postgres_dsn: str
) -> None:
    result = envelope_bench.run(kafka_bootstrap, postgres_dsn, calls=20, batch=10, sagas=3)
    assert set(result) == {
        "journal_p50",
        "journal_mean",
        "envelope_p50",
        "envelope_mean",
        "first_use_p50",
        "cache_miss_p50",
    }
    assert all(value > 0 for value in result.values())
    table = envelope_bench._table(result)
    ratio = re.search(r"\*\*ratio\*\* seal \+ open / journal \| \*\*([0-9.]+)x\*\*", table)
    assert ratio is not None
    assert float(ratio.group(1)) == pytest.approx(
        result["envelope_p50"] / result["journal_p50"], rel=1e-3, abs=1e-4
    )
