"""The request projection on real Kafka and PostgreSQL: its rows are the core's fold.

An approval forged on the topic (not signed by the approvals service's decision key) is no
signature in the table approvers read; a table rebuilt from the topic after the migration that
keeps the saga's events equals the one folded as events arrived; a message delivered twice
changes nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import DecisionSigner, EntryDraft, EventType, Sagacity, SagaStatus
from sagacity.consumers.approvals import RequestConsumer
from sagacity.entries import _attributes as attr
from sagacity.ports import RequestRow, RowState
from sagacity.postgres import PostgresRequestStore
from sagacity.postgres import migrate as run_migrations
from sagacity.postgres._requests import COMPONENT, MIGRATIONS
from sagacity.producer import KafkaConsumers
from sagacity.schemas import decode_entry
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.testing import InMemoryRequestStore

from .tools import Bank

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

E = EventType
ALL_STATES = tuple(s.value for s in RowState)
FORGER = "mallory@example.com"


@pytest.fixture
def schemas(postgres_dsn: str) -> Iterator[Callable[[], str]]:
    """Factory of conninfos, each on a fresh schema of its own (dropped after the test)."""
    made: list[str] = []

    def make() -> str:
        schema = f"proj_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        made.append(schema)
        params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
        params["options"] = f"-c search_path={schema}"
        return make_conninfo(**params)

    yield make
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for schema in made:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def service_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DecisionSigner:
    monkeypatch.setenv("SAGACITY_TEST_CALL_LOG", str(tmp_path / "calls.jsonl"))
    return DecisionSigner.ephemeral()


def _forge(journal: Any, saga_id: str, seq: int) -> None:
    """An ``APPROVED`` any producer to the topic can journal: linked, but not signed."""
    request = journal.entries(saga_id)[seq - 1]
    journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.APPROVED,
            tool=request.tool,
            actor=FORGER,
            attributes={
                attr.REF_SEQ: str(seq),
                attr.POLICY_VERSION: "1",
                attr.PAYLOAD_SHA256: request.attributes[attr.PAYLOAD_SHA256],
            },
        )
    )


def _journal_gates(bootstrap: str, topic: str, key: DecisionSigner) -> dict[str, int]:
    """Requests on ``topic`` decided by the service, and approvals forged beside them."""
    from sagacity.producer import KafkaJournal

    seqs: dict[str, int] = {}
    with KafkaJournal(bootstrap, topic=topic) as journal:
        agent = Sagacity(journal, compensation="delegated", writer_id="agent")
        service = Sagacity(journal, compensation="delegated", decision_signer=key)
        bank = agent.wrap(Bank())
        service.wrap(Bank())

        def gate(saga_id: str, privileged: bool = False) -> int:
            def work() -> None:
                bank.reserve_inventory("SKU-9")
                if privileged:
                    bank.grant_agent_access("agent-7", "operator")
                else:
                    bank.send_wire_transfer("100", "alice")

            result = agent.saga(saga_id, work)
            assert result.status is SagaStatus.AWAITING_APPROVAL
            assert result.awaiting_seq is not None
            seqs[saga_id] = result.awaiting_seq
            return result.awaiting_seq

        _forge(journal, "forged", gate("forged"))
        service.approve("approved", gate("approved"), "alice@example.com")
        seq = gate("rejected")
        _forge(journal, "rejected", seq)
        service.reject("rejected", seq, "bob@example.com", reason="no")
        seq = gate("two-person", privileged=True)
        service.approve("two-person", seq, "alice@example.com")
        _forge(journal, "two-person", seq)
        journal.flush()
    return seqs


def _identity(bootstrap: str, topic: str) -> str:
    """The journal's name in the service's signed decisions."""
    from sagacity.producer import KafkaJournal

    with KafkaJournal(bootstrap, topic=topic) as journal:
        return journal.identity


def _rows(store: PostgresRequestStore) -> list[RequestRow]:
    return sorted(store.requests(states=ALL_STATES), key=lambda r: (r.saga_id, r.seq))


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The next offset to be written of each partition that holds messages."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        ends = {}
        for partition in metadata.topics[topic].partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            if high > 0:
                ends[partition] = high
        return ends
    finally:
        consumer.close()


def _messages(bootstrap: str, topic: str, ends: dict[int, int]) -> list[Message]:
    """Every message of ``topic`` up to ``ends``, partition by partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    found: list[Message] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < sum(ends.values()):
            assert time.monotonic() < deadline, "the topic was not read to its end"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    return found


def _fold_until(store: PostgresRequestStore, topic: str, ends: dict[int, int]) -> None:
    deadline = time.monotonic() + 90
    while store.offsets(topic) != ends:
        assert time.monotonic() < deadline, (store.offsets(topic), ends)
        time.sleep(0.2)


def _consumer(store: PostgresRequestStore, bootstrap: str, topic: str) -> RequestConsumer:
    return RequestConsumer(
        store,
        consumers=KafkaConsumers(),
        bootstrap_servers=bootstrap,
        topic=topic,
        group_id=f"proj-{uuid.uuid4().hex}",
        decode=decode_entry,
    )


def test_the_projection_counts_only_approvals_the_service_signed_and_rebuilds_from_the_topic(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    schemas: Callable[[], str],
    service_key: DecisionSigner,
) -> None:
    topic = make_topic(partitions=2)
    verifier = DecisionVerifier([service_key.public_raw])
    # Folded as the events arrive.
    live = PostgresRequestStore(
        schemas(), topic=topic, verifier=verifier, journal=_identity(kafka_bootstrap, topic)
    )
    live.migrate()
    consumer = _consumer(live, kafka_bootstrap, topic)
    consumer.start()
    try:
        seqs = _journal_gates(kafka_bootstrap, topic, service_key)
        ends = _ends(kafka_bootstrap, topic)
        _fold_until(live, topic, ends)
    finally:
        consumer.stop()
    assert consumer.skipped == 0
    rows = {r.saga_id: r for r in _rows(live)}
    forged = rows["forged"]
    assert (forged.state, forged.signed_by, forged.decision, forged.decided_by) == (
        RowState.PENDING,
        (),
        None,
        None,
    )
    assert (rows["approved"].state, rows["approved"].signed_by) == (
        RowState.APPROVED,
        ("alice@example.com",),
    )
    assert (rows["rejected"].state, rows["rejected"].signed_by, rows["rejected"].decided_by) == (
        RowState.REJECTED,
        (),
        "bob@example.com",
    )
    assert (rows["two-person"].state, rows["two-person"].signed_by) == (
        RowState.PENDING,
        ("alice@example.com",),
    )
    assert [r.saga_id for r in live.requests()] == sorted(
        ("forged", "approved", "two-person"), key=lambda s: rows[s].requested_at_us
    )
    assert live.stats(now_us=time.time_ns() // 1000, window_s=3600).approved == 1

    # The same fold as the in-memory store's, from the sagas' chains.
    from sagacity.producer import KafkaJournal

    fake = InMemoryRequestStore(
        topic=topic, verifier=verifier, journal=_identity(kafka_bootstrap, topic)
    )
    with KafkaJournal(kafka_bootstrap, topic=topic) as reader:
        for saga_id in seqs:
            fake.apply(reader.entries(saga_id))
    assert sorted(fake.requests(states=ALL_STATES), key=lambda r: (r.saga_id, r.seq)) == _rows(live)

    # A table of the previous release (rows folded by SQL, the forged approval counted, the
    # topic consumed to its end) is rebuilt from the topic by the migration.
    old_dsn = schemas()
    with psycopg.connect(old_dsn) as conn:
        run_migrations(conn, COMPONENT, MIGRATIONS[:1])
        conn.execute(
            """INSERT INTO sagacity_approval_request (topic, saga_id, seq, tool, payload,
                   payload_sha256, requested_at_us, signatures_required, policy_version,
                   reversibility, state, signed_by, decision, decided_by, decided_at_us)
               VALUES (%s, 'forged', %s, %s, %s, %s, %s, 1, %s, %s, 'approved', %s,
                       'approved', %s, %s)""",
            (
                topic,
                forged.seq,
                forged.tool,
                forged.payload,
                forged.payload_sha256,
                forged.requested_at_us,
                forged.policy_version,
                forged.reversibility,
                [FORGER],
                FORGER,
                forged.requested_at_us + 1,
            ),
        )
        for partition, end in ends.items():
            conn.execute(
                "INSERT INTO sagacity_approval_offset (topic, partition, next_offset)"
                " VALUES (%s, %s, %s)",
                (topic, partition, end),
            )
    rebuilt = PostgresRequestStore(
        old_dsn, topic=topic, verifier=verifier, journal=_identity(kafka_bootstrap, topic)
    )
    assert rebuilt.get("forged", forged.seq).signed_by == (FORGER,)  # type: ignore[union-attr]
    rebuilt.migrate()
    assert set(rebuilt.offsets(topic).values()) == {0}
    consumer = _consumer(rebuilt, kafka_bootstrap, topic)
    consumer.start()
    try:
        _fold_until(rebuilt, topic, ends)
    finally:
        consumer.stop()
    assert _rows(rebuilt) == _rows(live)


def test_a_message_delivered_twice_changes_nothing(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    schemas: Callable[[], str],
    service_key: DecisionSigner,
) -> None:
    topic = make_topic(partitions=2)
    verifier = DecisionVerifier([service_key.public_raw])
    _journal_gates(kafka_bootstrap, topic, service_key)
    ends = _ends(kafka_bootstrap, topic)
    messages = _messages(kafka_bootstrap, topic, ends)
    assert [decode_entry(m.value() or b"").event_type for m in messages].count(E.APPROVED) == 5
    store = PostgresRequestStore(
        schemas(), topic=topic, verifier=verifier, journal=_identity(kafka_bootstrap, topic)
    )
    store.migrate()
    consumer = _consumer(store, kafka_bootstrap, topic)  # not started: its handler alone
    consumer.handle(messages)
    assert store.offsets(topic) == ends

    def snapshot() -> tuple[Any, ...]:
        with store.connect() as conn:
            events = conn.execute(
                "SELECT saga_id, seq, entry FROM sagacity_approval_event ORDER BY saga_id, seq"
            ).fetchall()
        return (_rows(store), events, store.offsets(topic))

    before = snapshot()
    assert {r.saga_id: r.signed_by for r in before[0]}["forged"] == ()
    consumer.handle(messages)  # every offset again
    for message in messages:  # and each alone
        consumer.handle([message])
    assert snapshot() == before
    # Accepted once; every redelivery is behind its saga's tail: dropped, not quarantined.
    assert consumer.applied == len(messages)
    assert consumer.quarantined == 0
    assert store.quarantined() == []
