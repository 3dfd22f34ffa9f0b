"""Smoke tests against the real broker and database the fixtures provide."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, Producer


def _produce(bootstrap: str, topic: str, messages: list[tuple[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    for key, value in messages:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still queued after 30 s"
    assert failures == []


def _consume(bootstrap: str, topic: str, group: str, count: int) -> list[tuple[str, str]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: list[tuple[str, str]] = []
    try:
        consumer.subscribe([topic])
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is None:
                if len(received) >= count:
                    break
                continue
            assert msg.error() is None, msg.error()
            received.append((msg.key().decode(), msg.value().decode()))
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    return received


@pytest.mark.kafka
def test_idempotent_acks_all_produce_is_read_back_by_a_consumer_group(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    messages = [(f"saga-{i % 4}", f"event-{i}") for i in range(20)]
    _produce(kafka_bootstrap, topic, messages)

    group = f"smoke-{uuid.uuid4().hex[:8]}"
    received = _consume(kafka_bootstrap, topic, group, len(messages))
    assert sorted(received) == sorted(messages)
    # Per-key order is kept: one key maps to one partition.
    for key in {k for k, _ in messages}:
        assert [v for k, v in received if k == key] == [v for k, v in messages if k == key]

    # The group committed its position: a second read by the same group gets nothing new.
    assert _consume(kafka_bootstrap, topic, group, 0) == []


@pytest.mark.kafka
def test_make_topic_creates_distinct_topics_with_the_partitions_asked(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    from confluent_kafka.admin import AdminClient

    first = make_topic(partitions=2, config={"retention.ms": "-1"})
    second = make_topic()
    assert first != second
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert len(topics[first].partitions) == 2
    assert len(topics[second].partitions) == 3


@pytest.mark.postgres
def test_postgres_round_trip_in_a_private_schema(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        assert schema[0].startswith("test_")
        conn.execute("CREATE TABLE entries (seq integer PRIMARY KEY, body text NOT NULL)")
        conn.execute("INSERT INTO entries VALUES (%s, %s), (%s, %s)", (1, "a", 2, "b"))
        conn.commit()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT seq, body FROM entries ORDER BY seq").fetchall()
    assert rows == [(1, "a"), (2, "b")]


@pytest.mark.postgres
def test_each_test_gets_a_schema_of_its_own(pg_dsn: str, postgres_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        assert row is not None
        mine = row[0]
        conn.execute("CREATE TABLE t (x int)")
        conn.commit()
    with psycopg.connect(postgres_dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 't'"
        ).fetchall()
    assert (mine,) in tables
    assert all(schema != "public" for (schema,) in tables)
