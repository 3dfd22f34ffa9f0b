"""Sweeping for abandoned sagas: the archive proposes quiet sagas, the topic's lease decides."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
from archive_helpers import rows
from click.testing import CliRunner

from sagacity import EntryDraft, EventType, compose
from sagacity.cli import main
from sagacity.consumers.archive._abandoned import SweepOutcome, quiet_sagas, sweep
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.postgres.archive import PostgresArchiveReads
from sagacity.producer import KafkaJournal

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def _later(seconds: float) -> Callable[[], float]:
    return lambda: time.time() + seconds


def _archive(bootstrap: str, dsn: str, topic: str, total: int) -> None:
    service = ArchiveService(
        ArchiveSettings(
            bootstrap_servers=bootstrap,
            database_url=dsn,
            topic=topic,
            group_id=f"g-{uuid.uuid4().hex[:6]}",
            poll_timeout=0.2,
        ),
        dependencies=compose.archive(),
    )
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if rows(dsn, "SELECT count(*) FROM side_effect_journal")[0][0] >= total:
                break
            time.sleep(0.2)
    finally:
        service.stop()
        runner.join(30)
    assert rows(dsn, "SELECT count(*) FROM side_effect_journal") == [(total,)]


def test_only_sagas_whose_lease_expired_are_taken_over(kafka_bootstrap, make_topic, archive_dsn):
    topic = make_topic(partitions=3)
    short = KafkaJournal(kafka_bootstrap, topic=topic, lease_ttl_s=30)
    long = KafkaJournal(kafka_bootstrap, topic=topic, lease_ttl_s=3600)
    abandoned, ended, held = (f"{n}-{uuid.uuid4().hex[:8]}" for n in ("gone", "done", "held"))
    try:
        for journal, saga in ((short, abandoned), (short, ended), (long, held)):
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
            journal.append(
                EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}")
            )
        short.append(EntryDraft(saga_id=ended, event_type=EventType.SAGA_ENDED, result="FAILED"))
        short.flush()
        long.flush()
    finally:  # the writers stop without ending their sagas, as a crashed agent would
        short.close()
        long.close()
    _archive(kafka_bootstrap, archive_dsn, topic, total=7)

    with psycopg.connect(archive_dsn) as conn:
        assert (
            quiet_sagas(PostgresArchiveReads(conn), topic=topic, older_than_s=30) == []
        )  # nothing is quiet yet
        later = quiet_sagas(
            PostgresArchiveReads(conn), topic=topic, older_than_s=30, now_s=time.time() + 40
        )
        assert (
            quiet_sagas(
                PostgresArchiveReads(conn),
                topic="another.topic",
                older_than_s=30,
                now_s=time.time() + 40,
            )
            == []
        )
    assert sorted(c.saga_id for c in later) == sorted([abandoned, held])  # the ended one is not
    assert {c.head_event for c in later} == {"INTENT"}
    assert all(c.head_age_s >= 40 for c in later)

    # 40 s later on the taker's clock: past the 30 s lease and the 5 s skew, not the hour.
    taker = KafkaJournal(kafka_bootstrap, topic=topic, wall_clock=_later(40))
    try:
        candidates = [c.saga_id for c in later]
        dry = {r.saga_id: r.outcome for r in sweep(taker, candidates, apply=False, reason="t")}
        assert dry == {abandoned: SweepOutcome.WOULD_TAKE, held: SweepOutcome.HELD}
        assert len(taker.read(abandoned).entries) == 2  # a dry run appends nothing

        done = sweep(taker, candidates, apply=True, reason="writer gone", actor="sweeper")
        assert {r.saga_id: r.outcome for r in done} == {
            abandoned: SweepOutcome.TAKEN,
            held: SweepOutcome.HELD,
        }
        chain = taker.read(abandoned).entries
        assert [e.event_type for e in chain][-1] is EventType.COMPENSATION_REQUESTED
        assert chain[-1].attributes["handoff"] == "takeover"
        assert chain[-1].actor == "sweeper"
        assert len(taker.read(held).entries) == 2  # left to its writer

        again = sweep(taker, [abandoned], apply=True, reason="writer gone")
        assert [r.outcome for r in again] == [SweepOutcome.NOT_LIVE]  # taken once only
    finally:
        taker.close()


def test_sweep_command_reports_and_refuses_bad_input(
    kafka_bootstrap, make_topic, archive_dsn, monkeypatch
):
    topic = make_topic(partitions=1)
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_ARCHIVE_DATABASE_URL", archive_dsn)
    result = CliRunner().invoke(main, ["saga", "sweep", "--older-than", "10m", "--topic", topic])
    assert result.exit_code == 0, result.output
    assert "no live saga" in result.output
    bad = CliRunner().invoke(main, ["saga", "sweep", "--older-than", "ten", "--topic", topic])
    assert bad.exit_code == 2
    assert "not a duration" in bad.output
    monkeypatch.setenv("SAGACITY_ARCHIVE_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    down = CliRunner().invoke(main, ["saga", "sweep", "--older-than", "10m", "--topic", topic])
    assert down.exit_code == 3  # an unreachable database, as for every command
    assert "error:" in down.output
