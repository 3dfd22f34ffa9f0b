"""The hostile-input fuzz suite's short form (``python -m bench.hostile --quick`` is the same
run at another size; the long form is ``python -m bench.hostile``).

Hypothesis draws batches of well-formed but hostile events (extreme integers and times, unknown
types and attributes, missing and foreign keys, huge and empty fields, wrong partitions,
duplicates, forks and decoys of sagas on the topic) and produces them to a real topic while the
approvals, compensation and archive services run as processes; after each batch a legitimate
saga is approved and resumed, another compensated, both archived within a bound, and every
service answers its health check (docs/reliability.md, "Hostile input").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import hostile

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def test_no_hostile_batch_stops_a_legitimate_saga(
    kafka_bootstrap: str, postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_DATABASE_URL", postgres_dsn)
    deployment = hostile.run(rounds=4, batch=25, home=tmp_path / "hostile")
    assert deployment.rounds == 5  # one before any batch, one after each
    assert sum(deployment.produced.values()) >= 4 * 12
    assert {"garbage", "request", "entry:decoy"} <= set(deployment.produced)
