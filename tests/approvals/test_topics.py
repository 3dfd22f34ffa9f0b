"""Two journal topics sharing one database keep separate approval queues, attention queues and
stats: each service folds, lists, expires and counts only its own topic's requests and sagas
(real Kafka and PostgreSQL; the same saga id on both topics)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from sagacity import (
    DecisionSigner,
    EntryDraft,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Sagacity,
    SagaStatus,
)
from sagacity.consumers.approvals import RequestConsumer
from sagacity.postgres import PostgresRequestStore as ApprovalStore
from sagacity.postgres._migrate import migrate
from sagacity.postgres._requests import COMPONENT, MIGRATIONS
from sagacity.producer import KafkaConsumers, KafkaJournal
from sagacity.schemas import decode_entry

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
        t: RequestConsumer(
            stores[t],
            consumers=KafkaConsumers(),
            bootstrap_servers=kafka_bootstrap,
            topic=t,
            group_id=t,
            decode=decode_entry,
        )
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
        # The approvals service of topic a signs the approval (the stores here verify none).
        service = Sagacity(journals[a], decision_signer=DecisionSigner.ephemeral())
        service.approve("shared-id", seq[a], "alice@example.com")
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
            " requested_at_us, signatures_required, policy_version, reversibility, state)"
            " VALUES ('old', 2, 'wire', '{}', 1, 1, '1', 'IRREVERSIBLE', 'rejected'),"
            " ('open', 2, 'wire', '{}', 1, 1, '1', 'IRREVERSIBLE', 'pending')"
        )
    store = ApprovalStore(pg_dsn, topic="orders.journal")
    store.migrate()
    store.migrate()  # idempotent
    # A closed request keeps its row; an open one is folded again from the topic under the
    # acceptance rule (migration 4).
    assert [(r.saga_id, r.seq) for r in store.requests(states=("rejected",))] == [("old", 2)]
    assert store.requests() == []
    assert ApprovalStore(pg_dsn, topic="other.journal").requests() == []
    with psycopg.connect(pg_dsn) as conn:
        key = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'sagacity_approval_request'::regclass AND contype = 'p'"
        ).fetchone()
    assert key == ("PRIMARY KEY (topic, saga_id, seq)",)


def _ended(journal: InMemoryJournal, saga_id: str, result: str) -> JournalEntry:
    """A run of ``saga_id`` ending ``result`` (a step left dirty when it failed)."""
    if not journal.entries(saga_id):
        journal.append(EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED))
    dirty = {"dirty": "seq 2 reserve: no undo"} if result == "COMPENSATION_FAILED" else {}
    return journal.append(
        EntryDraft(
            saga_id=saga_id, event_type=EventType.SAGA_ENDED, result=result, attributes=dirty
        )
    )


def test_two_topics_in_one_database_keep_separate_attention_queues(pg_dsn: str) -> None:
    stores = {t: ApprovalStore(pg_dsn, topic=t) for t in ("orders.journal", "payroll.journal")}
    for store in stores.values():
        store.migrate()
    orders, payroll = stores["orders.journal"], stores["payroll.journal"]
    on_orders, on_payroll = InMemoryJournal(), InMemoryJournal()
    # The same saga id on both topics, and a saga on one topic only.
    # Each saga's chain from its start (the store accepts only linked events).
    _ended(on_orders, "shared-id", "COMPENSATION_FAILED")
    _ended(on_orders, "only-orders", "COMPENSATION_FAILED")
    _ended(on_payroll, "shared-id", "COMPENSATION_FAILED")
    orders.apply([*on_orders.entries("shared-id"), *on_orders.entries("only-orders")])
    payroll.apply(on_payroll.entries("shared-id"))

    assert {r.saga_id for r in orders.attention()} == {"shared-id", "only-orders"}
    assert {r.saga_id for r in payroll.attention()} == {"shared-id"}
    # A later clean end on one topic takes the saga out of that topic's queue only.
    _ended(on_payroll, "shared-id", "COMPENSATED")
    payroll.apply(on_payroll.entries("shared-id"))
    assert payroll.attention() == []
    assert {r.saga_id for r in orders.attention()} == {"shared-id", "only-orders"}


def test_an_attention_table_made_before_topics_were_recorded_is_migrated(pg_dsn: str) -> None:
    old = ApprovalStore(pg_dsn, topic="orders.journal")
    with psycopg.connect(pg_dsn) as conn:
        # What the first migration made: the table without a topic, one saga in it.
        migrate(conn, COMPONENT, MIGRATIONS[:1])
        conn.execute(
            "INSERT INTO sagacity_attention (saga_id, status, detail, since_us, ended_seq)"
            " VALUES ('old', 'COMPENSATION_FAILED', 'seq 2 reserve: no undo', 1, 5)"
        )
    old.migrate()
    old.migrate()  # idempotent
    assert [r.saga_id for r in old.attention()] == ["old"]
    assert ApprovalStore(pg_dsn, topic="other.journal").attention() == []
    with psycopg.connect(pg_dsn) as conn:
        key = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'sagacity_attention'::regclass AND contype = 'p'"
        ).fetchone()
    assert key == ("PRIMARY KEY (topic, saga_id)",)


def _expired(journal: InMemoryJournal, saga_id: str) -> list[JournalEntry]:
    """A saga whose approval request lapsed: opened, the request, its ``EXPIRED``."""
    opened = journal.append(EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED))
    request = journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.AWAITING_APPROVAL,
            tool="send_wire_transfer",
            payload='{"amount":"1","to":"bob"}',
            recorded_at_us=1_000,
            attributes={"signatures_required": "1"},
        )
    )
    expired = journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.EXPIRED,
            tool="send_wire_transfer",
            recorded_at_us=2_000,
            attributes={"ref_seq": str(request.seq)},
        )
    )
    return [opened, request, expired]


def test_two_topics_in_one_database_list_only_their_own_closed_and_decided_requests(
    pg_dsn: str,
) -> None:
    orders = ApprovalStore(pg_dsn, topic="orders.journal")
    payroll = ApprovalStore(pg_dsn, topic="payroll.journal")
    orders.migrate()
    orders.apply(_expired(InMemoryJournal(), "shared-id"))
    payroll.apply(_expired(InMemoryJournal(), "shared-id"))
    payroll.apply(_expired(InMemoryJournal(), "only-payroll"))

    # What the console's attention page and metrics page read.
    assert [r.saga_id for r in orders.closed(("expired",), since_us=0)] == ["shared-id"]
    assert [r.saga_id for r in orders.decided(since_us=0)] == ["shared-id"]
    assert {r.saga_id for r in payroll.closed(("expired",), since_us=0)} == {
        "shared-id",
        "only-payroll",
    }
    assert {r.saga_id for r in payroll.decided(since_us=0)} == {"shared-id", "only-payroll"}
