"""Hostile inputs through the running approvals consumer on real Kafka and PostgreSQL: one
message never stops the projection (docs/reliability.md, "Hostile inputs").

Any agent can journal any attributes and any time; any saga's data key may be missing or
wrapped under a key-encryption key the service does not hold.  Each case is journaled before
legitimate requests on a one-partition topic (so it is read first): the legitimate ones must
still reach the inbox, and the hostile one must be quarantined with its reason or folded to a
safe, fail-closed value.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import EntryDraft, EventType, Sagacity
from sagacity._env import key_service_from_env
from sagacity.chain import link, payload_sha256
from sagacity.consumers.approvals import RequestConsumer
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.entries import _attributes as attr
from sagacity.ports import RequestRow, RowState
from sagacity.postgres import PostgresKeyStore, PostgresRequestStore
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KafkaConsumers, KafkaJournal
from sagacity.schemas import decode_entry, encode_entry
from sagacity.signing._decision_signature import DecisionSigner

from .tools import Bank

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

E = EventType
PAYLOAD = '{"amount":"100","to":"alice"}'
TTL_S = 60.0
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class Clock:
    """A service clock a test moves by hand (microseconds)."""

    def __init__(self) -> None:
        self.now = time.time_ns() // 1000

    def __call__(self) -> int:
        return self.now


def _request(journal: KafkaJournal, saga_id: str, **overrides: Any) -> None:
    """Journal an ``AWAITING_APPROVAL`` as any agent can: attributes and time of its choosing
    (``recorded_at_us`` among ``overrides``; the rest are attributes)."""
    recorded = overrides.pop("recorded_at_us", None)
    attributes = {
        attr.PAYLOAD_SHA256: payload_sha256(PAYLOAD),
        attr.POLICY_VERSION: "1",
        attr.REVERSIBILITY: "irreversible",
        attr.SIGNATURES_REQUIRED: "1",
        **overrides,
    }
    draft = EntryDraft(
        saga_id=saga_id,
        event_type=E.AWAITING_APPROVAL,
        tool="send_wire_transfer",
        payload=PAYLOAD,
        attributes=attributes,
        **({} if recorded is None else {"recorded_at_us": recorded}),
    )
    journal.append(draft)


def _produce_at_seq(bootstrap: str, topic: str, saga_id: str, seq: int) -> None:
    """A request at ``seq`` produced as raw bytes, as any producer to the topic can."""
    entry = link(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.AWAITING_APPROVAL,
            tool="send_wire_transfer",
            payload=PAYLOAD,
            attributes={attr.PAYLOAD_SHA256: payload_sha256(PAYLOAD)},
        ),
        seq=seq,
        prev_hash="ab" * 32,
    )
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=saga_id.encode(), value=encode_entry(entry))
    assert producer.flush(10) == 0


def _consumer(
    store: PostgresRequestStore, bootstrap: str, topic: str, keys: KeyService | None = None
) -> RequestConsumer:
    return RequestConsumer(
        store,
        consumers=KafkaConsumers(),
        bootstrap_servers=bootstrap,
        topic=topic,
        group_id=f"hostile-{uuid.uuid4().hex}",
        keys=keys,
        decode=decode_entry,
    )


def _rows(store: PostgresRequestStore) -> dict[str, RequestRow]:
    return {r.saga_id: r for r in store.requests(states=tuple(s.value for s in RowState))}


def _inbox_holds(
    store: PostgresRequestStore, consumer: RequestConsumer, sagas: set[str], timeout: float = 60
) -> dict[str, RequestRow]:
    """Wait until every saga of ``sagas`` has a request in the table (fails on a stall)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = _rows(store)
        if sagas <= set(rows):
            return rows
        assert time.monotonic() < deadline, (
            f"the inbox lacks {sorted(sagas - set(rows))}: the consumer is stalled "
            f"({consumer.error})"
        )
        time.sleep(0.2)


@pytest.fixture
def store_for(pg_dsn: str) -> Callable[..., PostgresRequestStore]:
    def make(topic: str, **options: Any) -> PostgresRequestStore:
        store = PostgresRequestStore(pg_dsn, topic=topic, **options)
        store.migrate()
        return store

    return make


def test_out_of_range_integers_in_a_request_never_stall_the_inbox(
    kafka_bootstrap: str, make_topic: Callable[..., str], store_for: Callable[..., Any]
) -> None:
    topic = make_topic(partitions=1)
    store = store_for(topic)
    consumer = _consumer(store, kafka_bootstrap, topic)
    consumer.start()
    legit = {f"legit-{i}" for i in range(4)}
    try:
        with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
            _request(journal, "many-signatures", signatures_required="3000000000")
            _request(journal, "huge-signatures", signatures_required="9" * 400)
            _request(journal, "negative-signatures", signatures_required="-5")
            _request(journal, "far-expiry", expires_at_us="9" * 30)
            _request(journal, "past-expiry", expires_at_us="-" + "9" * 30)
            _produce_at_seq(kafka_bootstrap, topic, "far-seq", 3_000_000_000)
            for saga in sorted(legit):
                _request(journal, saga)
        rows = _inbox_holds(store, consumer, legit)
    finally:
        consumer.stop()
    assert consumer.error is None
    # Damaged counts never lower the bar; impossible ones stay impossible and fit the column.
    assert rows["many-signatures"].signatures_required == INT32_MAX
    assert rows["huge-signatures"].signatures_required == INT32_MAX
    assert rows["negative-signatures"].signatures_required == 2
    assert rows["far-expiry"].expires_at_us == INT64_MAX
    assert rows["past-expiry"].expires_at_us == -INT64_MAX - 1
    assert {rows[s].signatures_required for s in legit} == {1}
    # A seq beyond 2^31 links to nothing here: quarantined with its seq, not an error.
    [far] = store.quarantined(saga_id="far-seq")
    assert (far.seq, far.kind) == (3_000_000_000, "unknown_prefix")
    assert consumer.quarantined == 1


def test_a_request_dated_at_the_end_of_time_or_a_year_ahead_lapses_by_the_services_clock(
    kafka_bootstrap: str, make_topic: Callable[..., str], store_for: Callable[..., Any]
) -> None:
    topic = make_topic(partitions=1)
    clock = Clock()
    store = store_for(topic, clock=clock)
    consumer = _consumer(store, kafka_bootstrap, topic)
    consumer.start()
    year = 365 * 86_400 * 1_000_000
    try:
        with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
            _request(journal, "end-of-time", recorded_at_us=INT64_MAX - 10)
            _request(journal, "year-ahead", recorded_at_us=clock.now + year)
            _request(journal, "legit")
            rows = _inbox_holds(store, consumer, {"end-of-time", "year-ahead", "legit"})
            assert rows["year-ahead"].seen_at_us == clock.now  # the service's clock, not theirs
            # The sweep's query neither overflows nor trusts the requester's date.
            ttl = int(TTL_S * 1_000_000)
            assert store.overdue(clock.now, ttl) == []
            later = clock.now + ttl + 1
            overdue = {r.saga_id for r in store.overdue(later, ttl)}
            assert overdue == {"end-of-time", "year-ahead", "legit"}
            # The service's sweep expires them: the core's deadline agrees with the table's.
            clock.now = later
            service = ApprovalService(
                Sagacity(
                    journal,
                    compensation="delegated",
                    approval_ttl=TTL_S,
                    clock=clock,
                    decision_signer=DecisionSigner.ephemeral(),
                ),
                store,
            )
            service.sagacity.wrap(Bank())
            expired = service.sweep()
        assert sorted(saga for saga, _ in expired) == ["end-of-time", "legit", "year-ahead"]
        wait = time.monotonic() + 60
        while {r.saga_id for r in store.requests()}:
            assert time.monotonic() < wait, [r.saga_id for r in store.requests()]
            time.sleep(0.2)
        assert {r.state for r in _rows(store).values()} == {RowState.EXPIRED}
        assert store.stats(now_us=later, window_s=3600).expired == 3
    finally:
        consumer.stop()
    assert consumer.error is None


@pytest.fixture
def stray_dsn(postgres_dsn: str) -> Iterator[str]:
    """A conninfo on another fresh schema: a key store the services never see."""
    schema = f"stray_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
    params["options"] = f"-c search_path={schema}"
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_sealed_events_whose_key_cannot_be_had_are_quarantined_and_the_inbox_goes_on(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    store_for: Callable[..., Any],
    pg_dsn: str,
    stray_dsn: str,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    service_kek = tmp_path / "service.kek"
    write_key_encryption_key(service_kek)
    foreign = write_key_encryption_key(tmp_path / "foreign.kek")
    elsewhere = KeyService(PostgresKeyStore(stray_dsn), KeyRing((foreign,)))
    foreign_here = KeyService(PostgresKeyStore(pg_dsn), KeyRing((foreign,)))
    # Sagas sealed under keys the service cannot have: one whose key row is in another store
    # (Kafka only: the service's table has no row), one whose row is wrapped under a KEK the
    # service does not hold.
    for keys, saga in ((elsewhere, "key-elsewhere"), (foreign_here, "key-foreign")):
        with KafkaJournal(kafka_bootstrap, topic=topic, keys=keys) as sealed:
            _request(sealed, saga)
        keys.close()
    # The service still starts: that row is data, not its configuration.
    keys = key_service_from_env({KEK_SETTING: str(service_kek), "SAGACITY_DATABASE_URL": pg_dsn})
    assert keys is not None
    assert keys.unheld == (foreign.key_id,)
    store = store_for(topic)
    consumer = _consumer(store, kafka_bootstrap, topic, keys=keys)
    consumer.start()
    legit = {f"legit-{i}" for i in range(4)}
    try:
        with KafkaJournal(kafka_bootstrap, topic=topic, keys=keys) as journal:
            for saga in sorted(legit):
                _request(journal, saga)
        rows = _inbox_holds(store, consumer, legit)
    finally:
        consumer.stop()
        keys.close()
    assert consumer.error is None
    assert {rows[s].payload for s in legit} == {PAYLOAD}
    assert "key-elsewhere" not in rows
    assert "key-foreign" not in rows
    kinds = {(q.saga_id, q.kind) for q in store.quarantined()}
    assert kinds == {
        ("key-elsewhere", "data key not found"),
        ("key-foreign", "key-encryption key not held"),
    }
    assert consumer.quarantined == 2


def test_a_row_the_database_refuses_is_quarantined_and_the_batch_goes_on(
    kafka_bootstrap: str, make_topic: Callable[..., str], store_for: Callable[..., Any]
) -> None:
    topic = make_topic(partitions=1)
    store = store_for(topic)
    # An operator's constraint the projection knows nothing of refuses one request's values.
    with store.connect() as conn:
        conn.execute(
            "ALTER TABLE sagacity_approval_request ADD CONSTRAINT few_signatures "
            "CHECK (signatures_required < 100)"
        )
    consumer = _consumer(store, kafka_bootstrap, topic)
    consumer.start()
    legit = {f"legit-{i}" for i in range(3)}
    try:
        with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
            _request(journal, "refused", signatures_required="1000")
            for saga in sorted(legit):
                _request(journal, saga)
        rows = _inbox_holds(store, consumer, legit)
    finally:
        consumer.stop()
    assert consumer.error is None
    assert "refused" not in rows
    [refused] = store.quarantined(saga_id="refused")
    assert refused.kind == "refused_by_database"
    assert "few_signatures" in refused.detail
    assert (refused.seq, refused.partition, refused.offset) == (1, 0, 0)


def test_approvals_list_shows_a_request_dated_at_the_end_of_time(live: Any) -> None:
    from click.testing import CliRunner

    from sagacity.cli import main

    from .conftest import TOKENS

    live.journal.append(
        EntryDraft(
            saga_id="end-of-time",
            event_type=E.AWAITING_APPROVAL,
            tool="send_wire_transfer",
            payload=PAYLOAD,
            attributes={attr.PAYLOAD_SHA256: payload_sha256(PAYLOAD)},
            recorded_at_us=INT64_MAX - 10,
        )
    )
    live.server.service.materialise("end-of-time")
    seq = live.gate("legit")
    listed = CliRunner().invoke(
        main,
        ["approvals", "--url", live.url, "list"],
        env={"SAGACITY_APPROVALS_TOKEN": TOKENS["alice"]},
        catch_exceptions=False,
    )
    assert listed.exit_code == 0, listed.output
    assert f"legit/{seq}" in listed.output
    assert "end-of-time/1" in listed.output
    assert f"{INT64_MAX - 10} us" in listed.output  # no date to show: the number itself


def test_a_saga_whose_kept_events_were_edited_in_the_table_is_quarantined_not_the_batch(
    kafka_bootstrap: str, make_topic: Callable[..., str], store_for: Callable[..., Any]
) -> None:
    topic = make_topic(partitions=1)
    store = store_for(topic)
    consumer = _consumer(store, kafka_bootstrap, topic)
    consumer.start()
    legit = {f"legit-{i}" for i in range(3)}
    try:
        with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
            _request(journal, "tampered")
            _inbox_holds(store, consumer, {"tampered"})
            # Anyone who can write the table can break what the projection kept.
            with store.connect() as conn:
                conn.execute(
                    "UPDATE sagacity_approval_event SET entry = '{\"nonsense\": 1}'::jsonb "
                    "WHERE saga_id = 'tampered'"
                )
            journal.append(
                EntryDraft(
                    saga_id="tampered",
                    event_type=E.REJECTED,
                    actor="bob@example.com",
                    attributes={attr.REF_SEQ: "1"},
                )
            )
            for saga in sorted(legit):
                _request(journal, saga)
        _inbox_holds(store, consumer, legit)
    finally:
        consumer.stop()
    assert consumer.error is None
    [kept] = store.quarantined(saga_id="tampered")
    assert (kept.seq, kept.kind) == (2, "unreadable_kept_events")
