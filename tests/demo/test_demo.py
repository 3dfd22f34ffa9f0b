"""The demonstration against the real broker and database."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from click.testing import CliRunner

from sagacity.chain import verify
from sagacity.cli import main
from sagacity.demo import TABLE, DemoError, DemoSettings, build_saga, decode, encode, run
from sagacity.dev import pick_free_port
from sagacity.producer import partition_for


def test_the_demo_saga_is_a_valid_chain_that_survives_the_wire_format() -> None:
    entries = build_saga("demo-unit")
    assert verify(entries).ok
    assert [decode(encode(e)) for e in entries] == list(entries)
    assert [e.event_type.value for e in entries] == [
        "SAGA_OPENED",
        "INTENT",
        "EXECUTED",
        "SAGA_ENDED",
    ]


@pytest.mark.kafka
@pytest.mark.postgres
def test_demo_runs_every_stage_and_stores_the_chain(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str
) -> None:
    topic = make_topic()
    lines: list[str] = []
    settings = DemoSettings(bootstrap_servers=kafka_bootstrap, database_url=pg_dsn, topic=topic)
    first = run(settings, echo=lines.append)
    second = run(settings, echo=lines.append)  # a second saga on the same topic and table

    stages = [line.split("]")[0].lstrip("[") for line in lines]
    expected = ["stack", "topic", "chain", "publish", "consume", "verify", "store", "readback"]
    assert stages == expected * 2
    assert first.saga_id != second.saga_id
    # Each saga sits in the partition the journal's readers compute for it.
    for report in (first, second):
        assert report.partition == partition_for(report.saga_id.encode(), 3)
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(f"SELECT saga_id, seq, entry_hash FROM {TABLE} ORDER BY saga_id, seq")
        stored = rows.fetchall()
    expected_rows = sorted(
        (e.saga_id, e.seq, e.hash) for report in (first, second) for e in report.entries
    )
    assert stored == expected_rows


@pytest.mark.kafka
def test_demo_fails_with_a_non_zero_exit_when_postgres_is_unreachable(
    kafka_bootstrap: str, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{pick_free_port()}/sagacity?connect_timeout=3"
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_DATABASE_URL", dead)
    result = CliRunner().invoke(main, ["demo", "--topic", make_topic()])
    assert result.exit_code == 1
    assert "[consume]" in result.stdout  # the Kafka stages ran
    assert "Error: store:" in result.stderr
    assert "demo complete" not in result.stdout


def test_demo_error_names_its_stage() -> None:
    error = DemoError("publish", "not acknowledged")
    assert error.stage == "publish"
    assert str(error) == "publish: not acknowledged"
