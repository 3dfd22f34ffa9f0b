"""A private broker keeps its data across a stop and a start."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sagacity.dev import KafkaBroker


@pytest.mark.kafka
@pytest.mark.slow
def test_private_broker_survives_a_restart_with_its_data(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "broker")
    try:
        bootstrap = broker.start()
        topic = "restart.check"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[
            topic
        ].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        sent = [f"message-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
        for value in sent:
            producer.produce(topic, value=value)
        assert producer.flush(30) == 0
        pid_before = broker.state().pid  # type: ignore[union-attr]

        assert broker.stop() is True
        assert not broker.is_running()

        bootstrap_after = broker.start()
        assert broker.state().pid != pid_before  # type: ignore[union-attr]
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_after,
                "group.id": "restart-check",
                "auto.offset.reset": "earliest",
            }
        )
        received: list[str] = []
        try:
            consumer.subscribe([topic])
            for _ in range(120):
                msg = consumer.poll(0.5)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    received.append(msg.value().decode())
                if len(received) == len(sent):
                    break
        finally:
            consumer.close()
        assert received == sent
    finally:
        broker.stop()
    assert not broker.is_running()


@pytest.mark.kafka
@pytest.mark.slow
def test_two_starts_of_one_directory_share_one_broker(tmp_path: Path) -> None:
    import threading

    first, second = KafkaBroker(tmp_path / "b"), KafkaBroker(tmp_path / "b")
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def start_first() -> None:
        try:
            results["first"] = first.start()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=start_first)
    thread.start()
    try:
        # Start the second while the first is (most likely) still coming up.
        for _ in range(200):
            if first.state() is not None:
                break
            threading.Event().wait(0.05)
        results["second"] = second.start()
        thread.join(120)
        assert errors == []
        assert results["first"] == results["second"]
        assert first.state() == second.state()
    finally:
        thread.join(120)
        first.stop()
    assert not second.is_running()
