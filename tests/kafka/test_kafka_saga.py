"""The saga core on the Kafka journal: chains on the topic, broker outages, broker restarts."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sagacity import EventType, Sagacity, SagaStatus, compensable, compensation, verify
from sagacity.dev import KafkaBroker
from sagacity.errors import JournalError, JournalUnavailableError
from sagacity.producer import KafkaJournal

pytestmark = pytest.mark.kafka
E = EventType


class Shop:
    """Tools that record every call, so a test can tell whether a tool ran."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.before_charge: Callable[[], None] = lambda: None

    @compensable(by="release")
    def reserve(self, item: str) -> str:
        self.calls.append(f"reserve:{item}")
        return f"res-{item}"

    @compensation
    def release(self, context: Any) -> None:
        self.calls.append(f"release:{context.result}")

    @compensable(by="refund")
    def charge(self, amount: int) -> str:
        self.calls.append(f"charge:{amount}")
        return f"ch-{amount}"

    @compensation
    def refund(self, context: Any) -> None:
        self.calls.append(f"refund:{context.result}")


def test_a_saga_on_kafka_is_a_verified_chain_on_the_topic(
    topic: str, journal_factory: Callable[..., KafkaJournal]
) -> None:
    journal = journal_factory(topic)
    sagacity = Sagacity(journal=journal)
    shop = Shop()
    tools = sagacity.wrap(shop)
    saga = f"order-{uuid.uuid4().hex}"
    result = sagacity.saga(saga, lambda: (tools.reserve("book"), tools.charge(12)))
    assert result.status is SagaStatus.COMPLETED
    read = journal_factory(topic).reader.read(saga)
    assert verify(read.entries).ok
    assert [(e.event_type, e.tool) for e in read.entries] == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "reserve"),
        (E.EXECUTED, "reserve"),
        (E.INTENT, "charge"),
        (E.EXECUTED, "charge"),
        (E.SAGA_ENDED, None),
    ]
    assert read.entries[1].payload == '{"item":"book"}'
    assert not read.ownership.live


def test_a_failed_saga_is_compensated_with_its_chain_on_the_topic(
    topic: str, journal_factory: Callable[..., KafkaJournal]
) -> None:
    journal = journal_factory(topic)
    sagacity = Sagacity(journal=journal)
    shop = Shop()
    tools = sagacity.wrap(shop)
    saga = f"order-{uuid.uuid4().hex}"

    def work() -> None:
        tools.reserve("book")
        tools.charge(12)
        raise RuntimeError("out of stock")

    result = sagacity.saga(saga, work)
    assert result.status is SagaStatus.COMPENSATED
    assert shop.calls == ["reserve:book", "charge:12", "refund:ch-12", "release:res-book"]
    read = journal_factory(topic).reader.read(saga)
    assert verify(read.entries).ok
    assert E.COMPENSATED in [e.event_type for e in read.entries]
    assert not read.rejected


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A broker of the test's own, which it may stop and restart."""
    broker = KafkaBroker(tmp_path / "broker")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _journal_topic(bootstrap: str) -> str:
    name = f"journal.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(30)
    return name


@pytest.mark.slow
def test_broker_down_mid_saga_the_tool_is_not_called(private_broker: KafkaBroker) -> None:
    bootstrap = private_broker.bootstrap_servers
    topic = _journal_topic(bootstrap)
    journal = KafkaJournal(bootstrap, topic=topic, ack_timeout_s=3.0, read_timeout_s=5.0)
    try:
        sagacity = Sagacity(journal=journal)
        shop = Shop()
        tools = sagacity.wrap(shop)
        saga = f"order-{uuid.uuid4().hex}"
        seen: list[BaseException] = []
        elapsed: list[float] = []

        def work() -> None:
            tools.reserve("book")
            private_broker.stop()
            began = time.monotonic()
            try:
                tools.charge(12)
            except JournalUnavailableError as exc:
                seen.append(exc)
                raise
            finally:
                elapsed.append(time.monotonic() - began)

        # The saga's own ending cannot be journaled either while the broker is down.
        with contextlib.suppress(JournalError):
            sagacity.saga(saga, work)
        assert "charge:12" not in shop.calls
        assert shop.calls[0] == "reserve:book"
        assert len(seen) == 1
        assert elapsed[0] < 3.0 + 2.0, f"the INTENT waited {elapsed[0]:.1f}s"
    finally:
        private_broker.start()
        with contextlib.suppress(JournalError):
            journal.close()
    with KafkaJournal(private_broker.bootstrap_servers, topic=topic) as reader:
        read = reader.read(saga)
    assert verify(read.entries).ok
    assert [e.tool for e in read.entries if e.event_type is E.EXECUTED][:1] == ["reserve"]
    assert "charge" not in [e.tool for e in read.entries if e.event_type is E.EXECUTED]


@pytest.mark.slow
def test_acknowledged_events_survive_a_broker_restart(private_broker: KafkaBroker) -> None:
    bootstrap = private_broker.bootstrap_servers
    topic = _journal_topic(bootstrap)
    journal = KafkaJournal(bootstrap, topic=topic)
    sagacity = Sagacity(journal=journal)
    tools = sagacity.wrap(Shop())
    sagas = [f"order-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
    for saga in sagas:
        assert sagacity.saga(saga, lambda: tools.charge(5)).status is SagaStatus.COMPLETED
    before = {saga: journal.read(saga).entries for saga in sagas}
    journal.close()
    private_broker.stop()
    assert not private_broker.is_running()
    bootstrap = private_broker.start()
    after = KafkaJournal(bootstrap, topic=topic)
    try:
        for saga in sagas:
            read = after.read(saga)
            assert read.entries == before[saga]
            assert len(read.entries) == 4
            assert verify(read.entries).ok
        # The journal keeps working on the restarted broker, extending an old saga's tail.
        more = Sagacity(journal=after)
        assert more.saga(f"order-after-{uuid.uuid4().hex[:6]}", lambda: None).status is (
            SagaStatus.COMPLETED
        )
    finally:
        after.close()


def test_broker_unreachable_at_start_is_a_clear_error() -> None:
    began = time.monotonic()
    with pytest.raises(JournalUnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:9"):
        Sagacity(journal=KafkaJournal("127.0.0.1:9", topic="t", startup_timeout_s=1.5))
    assert time.monotonic() - began < 8


def test_from_env_runs_sagas_on_kafka_and_delegates_compensation(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SAGACITY_TOPIC", topic)
    monkeypatch.setenv("SAGACITY_ACK_TIMEOUT_S", "5")
    monkeypatch.setenv("SAGACITY_KAFKA_CLIENT_ID", "sagacity-from-env-test")
    sagacity = Sagacity.from_env()
    journal = sagacity.journal
    try:
        assert isinstance(journal, KafkaJournal)
        assert journal.topic == topic
        shop = Shop()
        tools = sagacity.wrap(shop)
        saga = f"order-{uuid.uuid4().hex}"

        def work() -> None:
            tools.charge(30)
            raise RuntimeError("payment provider timeout")

        result = sagacity.saga(saga, work)
        assert result.status is SagaStatus.COMPENSATION_PENDING
        assert shop.calls == ["charge:30"]  # compensation is the service's job
        read = journal.reader.read(saga)
        assert verify(read.entries).ok
        kinds = [e.event_type for e in read.entries]
        assert E.COMPENSATION_REQUESTED in kinds
        assert read.entries[0].actor == sagacity.writer_id == journal.writer_id
        assert not read.ownership.live  # handed off to the compensation service
    finally:
        journal.close()


class Export:
    """A tool whose result (or error) is larger than the topic takes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.calls = 0

    @compensable(by="discard")
    def export(self, report: str) -> str:
        self.calls += 1
        return "é" * self.size

    @compensation
    def discard(self, context: Any) -> None:
        pass

    @compensable(by="discard")
    def explode(self, report: str) -> str:
        self.calls += 1
        raise RuntimeError("x" * self.size)


def test_an_outcome_too_large_for_the_topic_is_journaled_without_its_bulk(
    make_topic: Callable[..., str], journal_factory: Callable[..., KafkaJournal]
) -> None:
    import hashlib

    topic = make_topic(partitions=1, config={"max.message.bytes": "4096"})
    journal = journal_factory(topic)
    sagacity = Sagacity(journal=journal)
    tool = Export(6000)  # 12 000 UTF-8 bytes: the tool runs, its result cannot be published
    tools = sagacity.wrap(tool)
    saga = f"export-{uuid.uuid4().hex}"
    result = sagacity.saga(saga, lambda: tools.export("q3"))
    assert result.status is SagaStatus.COMPLETED
    assert result.value == "é" * 6000  # the caller still gets the whole value
    chain = journal_factory(topic).reader.read(saga).entries
    assert verify(chain).ok
    executed = [e for e in chain if e.event_type is E.EXECUTED]
    assert len(executed) == 1
    assert tool.calls == 1
    step = executed[0]
    assert step.result is None
    assert step.attributes["omitted"] == "result"
    assert step.attributes["omitted_sha256"] == hashlib.sha256(("é" * 6000).encode()).hexdigest()
    assert step.attributes["omitted_bytes"] == "12000"

    # A failure whose error text is too large: journaled FAILED with the error cut short, so
    # the saga fails and is compensated instead of leaving an INTENT without an outcome.
    failing = f"explode-{uuid.uuid4().hex}"
    outcome = sagacity.saga(failing, lambda: (tools.export("a"), tools.explode("b")))
    assert outcome.status is SagaStatus.COMPENSATED
    chain = journal_factory(topic).reader.read(failing).entries
    assert verify(chain).ok
    failed = [e for e in chain if e.event_type is E.FAILED]
    assert len(failed) == 1
    assert failed[0].error is not None
    assert failed[0].error.startswith("RuntimeError: xxx")
    assert failed[0].error.endswith("[cut short: too large to journal]")
    assert failed[0].attributes["omitted"] == "error"
    assert failed[0].attributes["omitted_bytes"] == str(len("RuntimeError: " + "x" * 6000))
    assert [e.event_type for e in chain if e.event_type is E.COMPENSATED] == [E.COMPENSATED]
