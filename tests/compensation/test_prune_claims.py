"""``sagacity compensation prune-claims``: settled claims pruned only past the topics' retention."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner

from sagacity._env import journal_identity
from sagacity.cli import main
from sagacity.ports import ClaimStatus
from sagacity.postgres._claims import TABLE
from sagacity.postgres._claims import PostgresClaimStore as ClaimStore

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
DAY_MS = 86_400_000


H = "ab" * 32


def _claims(dsn: str, journal: str | None = None) -> dict[tuple[str, int], str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT saga_id, step_seq, status FROM {TABLE} WHERE %s::text IS NULL OR journal = %s",
            (journal, journal),
        ).fetchall()
    return {(s, q): st for s, q, st in rows}


def _seed(dsn: str, journal: str) -> None:
    store = ClaimStore(dsn, instance="test", journal=journal)
    store.ensure_schema()
    for seq, status in enumerate(
        [ClaimStatus.COMPENSATED, ClaimStatus.FAILED, ClaimStatus.TIMED_OUT, ClaimStatus.CLAIMED],
        start=1,
    ):
        for saga in ("old", "new"):
            store.claim(saga, seq, step_hash=H, target="undo", key=f"{saga}:{seq}")
            if status is not ClaimStatus.CLAIMED:
                store.record(saga, seq, status, step_hash=H)
    store.close()
    with psycopg.connect(dsn) as conn:  # the "old" saga's claims were settled 10 days ago
        conn.execute(
            f"UPDATE {TABLE} SET claimed_at = now() - interval '10 days',"
            " finished_at = CASE WHEN finished_at IS NULL THEN NULL"
            " ELSE now() - interval '10 days' END WHERE saga_id = 'old' AND journal = %s",
            (journal,),
        )


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["compensation", "prune-claims", *args])


def test_prunes_only_settled_claims_older_than_the_retention(
    kafka_bootstrap, make_topic, pg_dsn, monkeypatch
):
    topic = make_topic(partitions=1, config={"retention.ms": str(7 * DAY_MS)})
    # The dead-letter topic keeps events longer: its retention sets the floor.
    dlq = make_topic(partitions=1, config={"retention.ms": str(8 * DAY_MS)})
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_COMPENSATION_DATABASE_URL", pg_dsn)
    journal = journal_identity(topic=topic, kafka={"bootstrap.servers": kafka_bootstrap})
    _seed(pg_dsn, journal)
    # Another journal sharing the database: its claims are its own topic's to prune.
    _seed(pg_dsn, journal.replace(topic, "another.topic"))
    theirs = _claims(pg_dsn, journal.replace(topic, "another.topic"))
    before = _claims(pg_dsn, journal)

    shorter = _run("--topic", topic, "--dlq-topic", dlq, "--older-than", "7d", "--apply")
    assert shorter.exit_code == 1
    assert "shorter than the topics' retention (8 days)" in shorter.output
    dry = _run("--topic", topic, "--dlq-topic", dlq)
    assert dry.exit_code == 0, dry.output
    assert "2 settled claim(s) finished more than 8 days ago" in dry.output
    assert _claims(pg_dsn, journal) == before  # a dry run deletes nothing

    done = _run("--topic", topic, "--dlq-topic", dlq, "--apply")
    assert done.exit_code == 0, done.output
    assert "pruned 2" in done.output
    assert _claims(pg_dsn, journal.replace(topic, "another.topic")) == theirs
    after = _claims(pg_dsn, journal)
    assert set(before) - set(after) == {("old", 1), ("old", 2)}  # COMPENSATED and FAILED
    assert after[("old", 3)] == "TIMED_OUT"  # in doubt: kept however old
    assert after[("old", 4)] == "CLAIMED"
    assert len([k for k in after if k[0] == "new"]) == 4  # recent ones kept


def test_refuses_while_a_topic_keeps_events_forever(
    kafka_bootstrap, make_topic, pg_dsn, monkeypatch
):
    topic = make_topic(partitions=1, config={"retention.ms": "-1"})
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_COMPENSATION_DATABASE_URL", pg_dsn)
    _seed(pg_dsn, "kafka:cluster/t")
    refused = _run("--topic", topic, "--older-than", "3650d", "--apply")
    assert refused.exit_code == 1
    assert "keeps events forever" in refused.output
    assert len(_claims(pg_dsn)) == 8
    missing = _run("--topic", "no.such.topic", "--apply")
    assert missing.exit_code == 2
    assert "does not exist" in missing.output
