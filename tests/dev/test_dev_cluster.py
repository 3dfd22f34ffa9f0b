"""``sagacity dev up --brokers 3``: a three-node KRaft cluster, its faults, its topic defaults."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sagacity.cli import main
from sagacity.dev import Stack
from sagacity.dev._props import broker_properties
from sagacity.dev.cluster import KafkaCluster
from sagacity.errors import DevStackError


def test_cluster_node_properties_name_every_voter_and_the_durable_setting(
    tmp_path: Path,
) -> None:
    voters = "1@127.0.0.1:1001,2@127.0.0.1:1002,3@127.0.0.1:1003"
    props = broker_properties(
        port=2002, controller_port=1002, log_dir=tmp_path, node_id=2, voters=voters, replication=3
    )
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    with pytest.raises(ValueError, match="at least 1"):
        broker_properties(port=1, controller_port=2, log_dir=tmp_path, replication=0)


def test_cluster_sizes_out_of_range_or_unlike_the_recorded_one_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(DevStackError, match="1 to 9"):
        KafkaCluster(tmp_path / "c", brokers=0)
    cluster = KafkaCluster(tmp_path / "c", brokers=3)
    with pytest.raises(DevStackError, match="nodes 1 to 3, not 4"):
        cluster.node(4)
    assert len({n.home for n in cluster.nodes()}) == 3  # records the layout
    with pytest.raises(DevStackError, match="cluster of 3 brokers, not 2"):
        KafkaCluster(tmp_path / "c", brokers=2)
    stack = Stack(tmp_path / "none")
    with pytest.raises(DevStackError, match="--brokers 3"):
        stack.cluster()


def test_broker_commands_without_a_cluster_say_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    result = CliRunner().invoke(main, ["dev", "kill-broker", "1"])
    assert result.exit_code == 2
    assert "sagacity dev up --brokers 3" in result.output
    bad = CliRunner().invoke(main, ["dev", "pause-broker", "0"])
    assert bad.exit_code == 2


def _produce(bootstrap: str, topic: str, n: int) -> int:
    """Produce ``n`` messages with acks=all; return how many were acknowledged."""
    acked = 0

    def done(err: KafkaError | None, _msg: object) -> None:
        nonlocal acked
        acked += err is None

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
         "message.timeout.ms": 60_000}
    )  # fmt: skip
    for i in range(n):
        producer.produce(
            topic, key=str(i).encode(), value=f"{topic}-{i}".encode(), on_delivery=done
        )
    producer.flush(90)
    return acked


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


@pytest.mark.kafka
@pytest.mark.slow
def test_a_three_broker_cluster_keeps_acknowledged_messages_through_kill_pause_and_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_DEV_HOME", str(tmp_path / "dev"))
    monkeypatch.delenv("SAGACITY_BOOTSTRAP_SERVERS", raising=False)
    runner = CliRunner()
    try:
        up = runner.invoke(main, ["dev", "up", "--brokers", "3", "--no-postgres"])
        assert up.exit_code == 0, up.output
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines()
        )
        bootstrap = exports["SAGACITY_BOOTSTRAP_SERVERS"]
        assert len(bootstrap.split(",")) == 3

        status = runner.invoke(main, ["dev", "status", "--no-postgres"])
        assert status.exit_code == 0, status.output
        assert [line.split()[:2] for line in status.stdout.splitlines()] == [
            ["kafka-1", "running"], ["kafka-2", "running"], ["kafka-3", "running"]
        ]  # fmt: skip

        topic = f"cluster-{uuid.uuid4().hex[:8]}"
        created = runner.invoke(
            main,
            ["topic", "create", "--bootstrap-servers", bootstrap, "--topic", topic,
             "--partitions", "3", "--retention", "1d", "--force-short-retention"],
        )  # fmt: skip
        assert created.exit_code == 0, created.output
        assert "replication factor 3, min.insync.replicas 2" in created.stdout

        assert _produce(bootstrap, topic, 100) == 100
        killed = runner.invoke(main, ["dev", "kill-broker", "2"])
        assert killed.exit_code == 0, killed.output
        down = runner.invoke(main, ["dev", "status", "--no-postgres"])
        assert down.exit_code == 1
        assert "kafka-2   stopped" in down.stdout
        # Two of three in sync: acks=all still succeeds, and nothing acknowledged is gone.
        assert _produce(bootstrap, topic, 100) == 100
        assert _count(bootstrap, topic, 3) == 200

        paused = runner.invoke(main, ["dev", "pause-broker", "3"])
        assert paused.exit_code == 0, paused.output
        assert "kafka-3   paused" in runner.invoke(main, ["dev", "status"]).stdout
        assert runner.invoke(main, ["dev", "resume-broker", "3"]).exit_code == 0

        began = time.monotonic()
        restarted = runner.invoke(main, ["dev", "restart-broker", "2"])
        assert restarted.exit_code == 0, restarted.output
        assert time.monotonic() - began < 120
        status = runner.invoke(main, ["dev", "status", "--no-postgres"])
        assert status.exit_code == 0, status.output
        assert _count(bootstrap, topic, 3) == 200

        wrong = runner.invoke(main, ["dev", "up", "--no-postgres", "--brokers", "1"])
        assert wrong.exit_code == 2
        assert "cluster of 3 brokers" in wrong.output
    finally:
        runner.invoke(main, ["dev", "down", "--purge"])
    assert not (tmp_path / "dev").exists()
