"""KafkaJournal against a real broker: order, headers, size limits, bad input, concurrency."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sagacity import EntryDraft, EventType, verify
from sagacity.errors import (
    EventTooLargeError,
    JournalUnavailableError,
    SerializationError,
    TopicConfigError,
    TopicNotFoundError,
)
from sagacity.producer import KafkaJournal, partition_for, traced
from sagacity.schemas import MAGIC, current_schema, decode_entry, encode_entry

pytestmark = pytest.mark.kafka
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

JournalFactory = Callable[..., KafkaJournal]


def _open(journal: KafkaJournal, saga: str) -> None:
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))


def _call(journal: KafkaJournal, saga: str, n: int) -> None:
    intent = journal.append(
        EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload=f'{{"n":{n}}}')
    )
    journal.append(
        EntryDraft(
            saga_id=saga,
            event_type=EventType.EXECUTED,
            tool="t",
            result=str(n),
            attributes={"ref_seq": str(intent.seq)},
        ),
        durable=False,
    )


def _raw_messages(bootstrap: str, topic: str, partition: int) -> list[object]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[object] = []
        deadline = time.monotonic() + 20
        while len(out) < high and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        return out
    finally:
        consumer.close()


def test_events_land_in_the_saga_partition_with_headers(
    kafka_bootstrap: str, topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    saga = f"saga-{uuid.uuid4().hex}"
    _open(journal, saga)
    with traced(TRACEPARENT):
        _call(journal, saga, 1)
    journal.flush()
    partition = partition_for(saga.encode(), 6)
    messages = [
        m for m in _raw_messages(kafka_bootstrap, topic, partition) if m.key() == saga.encode()
    ]  # type: ignore[attr-defined]
    assert len(messages) == 3
    headers = [dict(m.headers()) for m in messages]  # type: ignore[attr-defined]
    assert [h["event_type"] for h in headers] == [b"SAGA_OPENED", b"INTENT", b"EXECUTED"]
    assert all(h["saga_id"] == saga.encode() for h in headers)
    assert all(
        h["schema_fingerprint"] == current_schema().fingerprint.hex().encode() for h in headers
    )
    assert "traceparent" not in headers[0]
    assert headers[1]["traceparent"] == TRACEPARENT.encode()
    entries = [decode_entry(m.value()) for m in messages]  # type: ignore[attr-defined]
    assert entries == list(journal.entries(saga))
    assert entries[0].actor == journal.writer_id
    assert verify(entries).ok


def test_partition_matches_librdkafka_murmur2(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=7)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all"}
    )
    got: dict[str, int] = {}
    keys = [f"saga-{i}-{uuid.uuid4().hex[:6]}" for i in range(60)]

    def record(err: object, msg: object) -> None:
        assert err is None
        got[msg.key().decode()] = msg.partition()  # type: ignore[attr-defined]

    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"x", on_delivery=record)
    assert producer.flush(30) == 0
    assert got == {k: partition_for(k.encode(), 7) for k in keys}


def test_per_saga_order_across_partitions_and_producers(
    topic: str, journal_factory: JournalFactory
) -> None:
    journals = [journal_factory(topic) for _ in range(3)]
    sagas = {
        j: [f"saga-{i}-{n}-{uuid.uuid4().hex[:6]}" for n in range(8)]
        for i, j in enumerate(journals)
    }
    errors: list[BaseException] = []

    def run(journal: KafkaJournal) -> None:
        try:
            for saga in sagas[journal]:
                _open(journal, saga)
            for step in range(10):
                for saga in sagas[journal]:
                    _call(journal, saga, step)
            journal.flush()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(j,)) for j in journals]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    reader = journal_factory(topic).reader
    partitions = set()
    for journal, names in sagas.items():
        for saga in names:
            read = reader.read(saga)
            partitions.add(read.partition)
            assert not read.rejected
            assert not read.skipped
            assert len(read.entries) == 21
            assert verify(read.entries).ok
            assert read.offsets == sorted(read.offsets)
            assert [e.result for e in read.entries if e.event_type is EventType.EXECUTED] == [
                str(n) for n in range(10)
            ]
            assert read.entries[0].actor == journal.writer_id
    assert len(partitions) > 3


def test_threads_appending_to_one_saga_lose_nothing(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    saga = f"saga-{uuid.uuid4().hex}"
    _open(journal, saga)

    def work(worker: int) -> None:
        for i in range(10):
            journal.append(
                EntryDraft(
                    saga_id=saga, event_type=EventType.INTENT, payload=f'{{"w":{worker},"i":{i}}}'
                ),
                durable=i % 2 == 0,
            )

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.flush()
    read = journal_factory(topic).reader.read(saga)
    assert len(read.entries) == 81
    assert verify(read.entries).ok
    assert not read.rejected


def test_append_async_yields_while_awaiting_the_ack(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    saga = f"yield-{uuid.uuid4().hex[:6]}"
    _open(journal, saga)

    async def main() -> tuple[bool, int]:
        draft = EntryDraft(saga_id=saga, event_type=EventType.INTENT, payload='{"s":1}')
        task = asyncio.create_task(journal.append_async(draft))
        # The task's first step runs before this coroutine resumes. An append that blocked on
        # the broker's acknowledgement would have finished in that step; one that awaits it
        # cannot have, because the acknowledgement is delivered in a later loop iteration.
        await asyncio.sleep(0)
        pending = not task.done()
        entry = await task
        return pending, entry.seq

    pending, seq = asyncio.run(main())
    assert pending, "append_async completed without yielding to the event loop"
    assert journal.read(saga).entries[-1].seq == seq


def test_async_sagas_do_not_block_the_loop(topic: str, journal_factory: JournalFactory) -> None:
    journal = journal_factory(topic)
    sagas = [f"async-{i}-{uuid.uuid4().hex[:6]}" for i in range(32)]
    for saga in sagas:
        _open(journal, saga)

    async def main() -> float:
        worst = 0.0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        async def saga_run(saga: str) -> None:
            for step in range(10):
                intent = await journal.append_async(
                    EntryDraft(saga_id=saga, event_type=EventType.INTENT, payload=f'{{"s":{step}}}')
                )
                await journal.append_async(
                    EntryDraft(
                        saga_id=saga,
                        event_type=EventType.EXECUTED,
                        attributes={"ref_seq": str(intent.seq)},
                    ),
                    durable=False,
                )

        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(saga_run(s) for s in sagas))
        stop.set()
        await tick
        return worst

    worst = asyncio.run(main())
    journal.flush()
    # A gross bound only: stalls on a loaded machine say little. The deterministic check of
    # non-blocking appends is test_append_async_yields_while_awaiting_the_ack.
    assert worst < 1.0, f"the event loop stalled for {worst * 1000:.0f} ms"
    for saga in sagas[:4]:
        read = journal.read(saga)
        assert len(read.entries) == 21
        assert verify(read.entries).ok


def test_missing_topic_names_the_create_command(kafka_bootstrap: str) -> None:
    with pytest.raises(TopicNotFoundError, match="sagacity topic create"):
        KafkaJournal(kafka_bootstrap, topic=f"missing.{uuid.uuid4().hex}")


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compacted_topic_is_refused(
    kafka_bootstrap: str, make_topic: Callable[..., str], policy: str
) -> None:
    topic = make_topic(partitions=1, config={"cleanup.policy": policy})
    with pytest.raises(TopicConfigError, match="erase every saga's history"):
        KafkaJournal(kafka_bootstrap, topic=topic)


def test_unreachable_broker_at_start_fails_in_bounded_time() -> None:
    began = time.monotonic()
    with pytest.raises(JournalUnavailableError, match="cannot reach Kafka"):
        KafkaJournal("127.0.0.1:1", topic="sagacity.journal", startup_timeout_s=2.0)
    assert time.monotonic() - began < 10


def test_oversized_event_is_refused_before_publishing(
    make_topic: Callable[..., str], journal_factory: JournalFactory
) -> None:
    topic = make_topic(partitions=1, config={"max.message.bytes": "4096"})
    journal = journal_factory(topic)
    assert journal.max_event_bytes == 4096
    saga = f"saga-{uuid.uuid4().hex}"
    _open(journal, saga)
    with pytest.raises(EventTooLargeError, match="at most 4096") as info:
        journal.append(
            EntryDraft(saga_id=saga, event_type=EventType.INTENT, payload='"' + "x" * 5000 + '"')
        )
    assert info.value.limit == 4096
    assert info.value.size > 4096
    # The largest payload the check lets through is really accepted by the broker.
    accepted = None
    for size in range(4096, 3000, -8):
        try:
            accepted = journal.append(
                EntryDraft(
                    saga_id=saga, event_type=EventType.INTENT, payload='"' + "y" * size + '"'
                )
            )
            break
        except EventTooLargeError:
            continue
    assert accepted is not None
    journal.flush()
    chain = journal_factory(topic).reader.read(saga).entries
    assert [e.seq for e in chain] == [1, 2]
    assert chain[1].payload == accepted.payload


def test_non_json_payload_is_refused_and_nothing_is_written(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    saga = f"saga-{uuid.uuid4().hex}"
    _open(journal, saga)
    with pytest.raises(SerializationError, match="not JSON"):
        journal.append(EntryDraft(saga_id=saga, event_type=EventType.INTENT, payload="{oops"))
    _call(journal, saga, 1)
    journal.flush()
    assert [e.seq for e in journal.read(saga).entries] == [1, 2, 3]


def test_readers_skip_undecodable_messages_into_a_report(
    kafka_bootstrap: str, topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    saga = f"saga-{uuid.uuid4().hex}"
    _open(journal, saga)
    journal.flush()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    partition = partition_for(saga.encode(), 6)
    good = journal.read(saga).entries[0]
    garbage = [
        b"not avro at all",
        MAGIC + b"\x01" * 8 + encode_entry(good)[10:],  # unknown fingerprint
        encode_entry(good)[:-5],  # truncated
        b"",
    ]
    for value in garbage:
        producer.produce(topic, key=saga.encode(), value=value, partition=partition)
    assert producer.flush(30) == 0
    _call(journal, saga, 7)
    journal.flush()
    read = journal_factory(topic).reader.read(saga)
    assert [e.seq for e in read.entries] == [1, 2, 3]
    assert verify(read.entries).ok
    reasons = [s.reason for s in read.skipped]
    assert len(reasons) == 4
    assert "not a journal event" in reasons[0]
    assert "unknown schema fingerprint" in reasons[1]
    assert "invalid Avro" in reasons[2]
    assert "truncated" in reasons[3]
    whole = journal_factory(topic).reader.read_partition(partition)
    assert len(whole.skipped) == 4
    assert len(whole.sagas[saga].entries) == 3


def test_async_append_whose_ack_never_arrives_fails_and_poisons_the_saga(
    topic: str, journal_factory: JournalFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagacity.producer import _delivery

    journal = journal_factory(topic, ack_timeout_s=1.0)
    saga = f"lost-ack-{uuid.uuid4().hex[:6]}"
    _open(journal, saga)
    # Swallow every delivery report from here on: the journal never learns of the ack.
    monkeypatch.setattr(_delivery.Delivery, "settle", lambda self, error, message: None)

    async def main() -> None:
        await journal.append_async(
            EntryDraft(saga_id=saga, event_type=EventType.INTENT, payload='{"n":1}')
        )

    with pytest.raises(JournalUnavailableError, match="did not acknowledge INTENT seq 2"):
        asyncio.run(main())
    monkeypatch.undo()
    # The saga is poisoned: the next append re-reads the topic instead of trusting the tail.
    assert journal._sagas.states[saga].poisoned
    entry = journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED))
    assert entry.seq == 3
    assert verify(journal.read(saga).entries).ok


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_durable_intent_acknowledged_after_an_earlier_event_was_refused_is_not_confirmed(
    mode: str, topic: str, journal_factory: JournalFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker can acknowledge an INTENT after refusing the pipelined EXECUTED before it
    (an idempotent producer's epoch bump after a timeout): that INTENT would not extend the
    chain on the topic, so its append fails and the tool is not called."""
    from confluent_kafka import KafkaError

    from sagacity.producer import _delivery

    journal = journal_factory(topic)
    saga = f"gap-{mode}-{uuid.uuid4().hex[:6]}"
    _open(journal, saga)
    intent_published = threading.Event()
    produce = journal._produce

    def producing(entry: object, value: bytes | None = None) -> object:
        delivery = produce(entry, value)  # type: ignore[arg-type]
        if getattr(entry, "seq", None) == 4:
            intent_published.set()
        return delivery

    settle = _delivery.Delivery.settle

    def refusing(self: _delivery.Delivery, error: object, message: object) -> None:
        if self.entry.event_type is EventType.EXECUTED:
            # Held until the next INTENT is out, then reported as refused (it did land).
            assert intent_published.wait(10)
            error = KafkaError(KafkaError._MSG_TIMED_OUT)
        settle(self, error, message)  # type: ignore[arg-type]

    monkeypatch.setattr(journal, "_produce", producing)
    monkeypatch.setattr(_delivery.Delivery, "settle", refusing)
    _call(journal, saga, 1)  # INTENT seq 2 acknowledged, EXECUTED seq 3 "refused"
    second = EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload='{"n":2}')

    async def append_async() -> None:
        await journal.append_async(second)

    def append() -> None:
        if mode == "sync":
            journal.append(second)
        else:
            asyncio.run(append_async())

    expected = "acknowledged INTENT seq 4.*earlier EXECUTED seq 3 was refused"
    with pytest.raises(JournalUnavailableError, match=expected) as caught:
        append()
    assert "the tool is not called" in caught.value.message
    monkeypatch.undo()
    assert journal._sagas.states[saga].poisoned
    journal.flush()  # the refusal was reported to the appender, not again here
    # The next append reads the topic (where seq 3 and 4 did land) and extends its tail.
    ended = journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED))
    assert ended.seq == 5
    read = journal.read(saga)
    assert [e.seq for e in read.entries] == [1, 2, 3, 4, 5]
    assert verify(read.entries).ok
