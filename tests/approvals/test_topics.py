"""Two journal topics sharing one database keep separate approval queues and stats: each
service folds, lists, expires and counts only its own topic's requests (real Kafka and
PostgreSQL; the same saga id on both topics)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from sagacity import Sagacity, SagaStatus
from sagacity.consumers.approvals import ApprovalStore, RequestConsumer
from sagacity.producer import KafkaJournal

from .tools import Bank

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def test_two_topics_in_one_database_never_mix(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str
) -> None:
    topics = [make_topic(partitions=1), make_topic(partitions=1)]
    stores = {t: ApprovalStore(pg_dsn, topic=t) for t in topics}
    for store in stores.values():
        store.migrate()
    journals = {t: KafkaJournal(kafka_bootstrap, topic=t) for t in topics}
    consumers = {
        t: RequestConsumer(stores[t], bootstrap_servers=kafka_bootstrap, topic=t, group_id=t)
        for t in topics
    }
    try:
        agents = {t: Sagacity(journals[t], compensation="delegated") for t in topics}
        banks = {t: agents[t].wrap(Bank()) for t in topics}
        # The same saga id on both topics; a second request on the first topic only.
        a, b = topics
        seq = {}
        for topic, amount in ((a, "100"), (b, "7")):
            done = agents[topic].saga(
                "shared-id", lambda t=topic, x=amount: banks[t].send_wire_transfer(x, "alice")
            )
            assert done.status is SagaStatus.AWAITING_APPROVAL
            seq[topic] = done.awaiting_seq
        agents[a].saga("only-on-a", lambda: banks[a].send_wire_transfer("1", "bob"))
        agents[a].approve("shared-id", seq[a], "alice@example.com")
        for consumer in consumers.values():
            consumer.start()
        deadline = time.monotonic() + 60
        while not (
            [r.state.value for r in stores[a].requests(states=("approved",))] == ["approved"]
            and len(stores[b].requests()) == 1
        ):
            assert time.monotonic() < deadline, "not folded"
            time.sleep(0.1)

        listed = {
            t: {(r.saga_id, r.payload) for r in stores[t].requests(states=("pending", "approved"))}
            for t in topics
        }
        assert listed[a] == {
            ("shared-id", '{"amount":"100","to":"alice"}'),
            ("only-on-a", '{"amount":"1","to":"bob"}'),
        }
        assert listed[b] == {("shared-id", '{"amount":"7","to":"alice"}')}
        assert stores[b].get("shared-id", seq[b]).state.value == "pending"  # type: ignore[union-attr]
        stats = {t: stores[t].stats(now_us=agents[t].now_us(), window_s=3600) for t in topics}
        assert (stats[a].approved, stats[a].pending) == (1, 2)
        assert (stats[b].approved, stats[b].pending) == (0, 1)
        # Expiry sweeps see only their own topic's overdue requests.
        far = agents[a].now_us() + 10**12
        assert {r.saga_id for r in stores[b].overdue(far, 1)} == {"shared-id"}
        assert {r.saga_id for r in stores[a].overdue(far, 1)} == {"shared-id", "only-on-a"}
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(
                "SELECT topic, count(*) FROM sagacity_approval_request GROUP BY topic"
            ).fetchall()
        assert dict(rows) == {a: 2, b: 1}
    finally:
        for consumer in consumers.values():
            consumer.stop()
        for journal in journals.values():
            journal.close()


def test_a_table_made_before_topics_were_recorded_is_migrated(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            """CREATE TABLE sagacity_approval_request (
                   saga_id text NOT NULL, seq integer NOT NULL, tool text NOT NULL,
                   payload text NOT NULL, payload_sha256 text, requested_at_us bigint NOT NULL,
                   expires_at_us bigint, signatures_required integer NOT NULL,
                   policy_version text NOT NULL, reversibility text NOT NULL,
                   state text NOT NULL DEFAULT 'pending', signed_by text[] NOT NULL DEFAULT '{}',
                   decision text, decided_by text, decided_at_us bigint,
                   decision_policy_version text, closed_at_us bigint,
                   PRIMARY KEY (saga_id, seq))"""
        )
        conn.execute(
            "INSERT INTO sagacity_approval_request (saga_id, seq, tool, payload,"
            " requested_at_us, signatures_required, policy_version, reversibility)"
            " VALUES ('old', 2, 'wire', '{}', 1, 1, '1', 'IRREVERSIBLE')"
        )
    store = ApprovalStore(pg_dsn, topic="orders.journal")
    store.migrate()
    store.migrate()  # idempotent
    assert [(r.saga_id, r.seq) for r in store.requests()] == [("old", 2)]
    assert ApprovalStore(pg_dsn, topic="other.journal").requests() == []
    with psycopg.connect(pg_dsn) as conn:
        key = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'sagacity_approval_request'::regclass AND contype = 'p'"
        ).fetchone()
    assert key == ("PRIMARY KEY (topic, saga_id, seq)",)
