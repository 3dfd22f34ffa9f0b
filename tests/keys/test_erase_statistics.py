"""``sagacity erase --apply`` leaves no copy of the erased values in PostgreSQL's column
statistics (``pg_stats``: most common values, histogram bounds), which keep sampled values
until the next ``ANALYZE`` (docs/operations/erasure.md)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from sagacity import EntryDraft, EventType
from sagacity.postgres import PostgresClaimStore
from sagacity.postgres._statistics import refresh_statistics
from sagacity.postgres.archive import migrate
from sagacity.privacy._envelope import write_key_encryption_key
from sagacity.producer import KafkaJournal
from sagacity.signing._operator_signature import generate_key as generate_operator_key
from tests.archive.archive_helpers import with_option
from tests.keys.test_erase import Stack

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

MARKER = "marker-stats-5d1e@example.org"
SAGA = "erase-my-statistics"
STEPS = 30


def _statistics(dsn: str) -> list[tuple[str, str, str]]:
    """Every column statistic of the test's schema holding the marker: (table, column, which)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename::text, attname::text, most_common_vals::text,"
            " histogram_bounds::text, most_common_elems::text"
            " FROM pg_stats WHERE schemaname = current_schema()"
        ).fetchall()
    found = []
    for table, column, *values in rows:
        for which, value in zip(("mcv", "histogram", "elements"), values, strict=True):
            if value is not None and MARKER in value:
                found.append((table, column, which))
    return found


@pytest.fixture
def stack(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> Stack:
    """A sealed saga whose payload, result and note repeat one marker ``STEPS`` times, archived,
    with claims whose result repeats it, and the schema ANALYZEd: the marker is a most common
    value of their columns."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    topic = make_topic(partitions=1)
    kek = tmp_path / "journal.kek"
    write_key_encryption_key(kek)
    operator = tmp_path / "operator.pem"
    generate_operator_key(operator)
    s = Stack(kafka_bootstrap, topic, pg_dsn, kek, operator)
    keys = s.keys()
    journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
    try:
        journal.append(EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_OPENED))
        for _ in range(STEPS):
            intent = journal.append(
                EntryDraft(
                    saga_id=SAGA,
                    event_type=EventType.INTENT,
                    tool="mail",
                    payload=json.dumps({"to": MARKER}),
                    attributes={"note": MARKER},
                )
            )
            journal.append(
                EntryDraft(
                    saga_id=SAGA,
                    event_type=EventType.EXECUTED,
                    tool="mail",
                    result=MARKER,
                    attributes={"ref_seq": str(intent.seq)},
                )
            )
        journal.append(
            EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_ENDED, result="COMPLETED")
        )
        journal.flush()
    finally:
        journal.close()
        keys.close()
    s.archive_topic()
    claims = PostgresClaimStore(pg_dsn, instance="test", journal=f"kafka:cluster/{topic}")
    claims.ensure_schema()
    claims.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for seq in range(STEPS):
            conn.execute(
                "INSERT INTO sagacity_compensation_claims (journal, saga_id, step_seq, step_hash,"
                " target, idempotency_key, instance, status, result) VALUES (%s, %s, %s, %s,"
                " 'unsend', 'k', 'test', 'COMPENSATED', %s)",
                (f"kafka:cluster/{topic}", SAGA, seq + 1, "0" * 64, MARKER),
            )
        conn.execute("ANALYZE")  # the statistics as autovacuum would have gathered them
    return s


def test_erase_refreshes_the_statistics_of_what_it_cleared(stack: Stack) -> None:
    before = _statistics(stack.dsn)
    # The marker is sampled into the statistics of the archive's columns (the partitioned
    # table and its month) and of the claims' results.
    assert {(column, which) for _table, column, which in before} >= {
        ("payload", "mcv"),
        ("result", "mcv"),
        ("attributes", "mcv"),
    }
    assert any(table == "sagacity_compensation_claims" for table, _c, _w in before)
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert _statistics(stack.dsn) == []


def test_a_role_that_may_not_analyze_a_table_is_told_what_to_run(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    assert refresh_statistics(pg_dsn, pg_dsn) == []  # the owner: every cleared column
    name = f"sgc_eraser_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema = sql.Identifier(str(conn.execute("SELECT current_schema()").fetchone()[0]))  # type: ignore[index]
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role))
        try:
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            with caplog.at_level(logging.WARNING, logger="sagacity.erasure"):
                missed = refresh_statistics(
                    with_option(pg_dsn, f"-c role={name}"), with_option(pg_dsn, f"-c role={name}")
                )
        finally:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))
    # The services' tables do not exist here (skipped); the archive's are not the role's.
    assert missed == ["side_effect_journal", "archive_quarantine"]
    said = caplog.text
    assert "run ANALYZE side_effect_journal (payload, result, error, attributes, salts)" in said
    assert "as the table's owner" in said
