"""Reads continued from an earlier read give what a read from the partition's start gives, and
the journal's confirmed append reads only what was published since its first read."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sagacity import EntryDraft, EventType, Sagacity
from sagacity.producer import KafkaJournal, SagaReader, partition_for
from tests.kafka.saga_mix import accepted, reported, write_mix

pytestmark = pytest.mark.kafka
JournalFactory = Callable[..., KafkaJournal]


def test_a_continued_read_equals_a_full_read_at_every_cut(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    ids = write_mix(kafka_bootstrap, topic, partitions=2, sagas=12, events=900, seed=7)
    reader = SagaReader({"bootstrap.servers": kafka_bootstrap}, topic, partitions=2)
    try:
        rng = random.Random(3)
        for saga in ids:
            full = reader.read(saga)
            assert full.entries, saga
            # Continue from several partial reads, each cut at a random offset.
            cuts = sorted(rng.sample(range(full.next_offset), 3))
            step = reader.read(saga, until_offset=cuts[0])
            assert step.next_offset == cuts[0] + 1
            for cut in cuts[1:]:
                before = step.copy()
                step = reader.read(saga, resume=step, until_offset=cut)
                assert accepted(before) != accepted(step) or before.next_offset < step.next_offset
            step = reader.read(saga, resume=step)
            assert accepted(step) == accepted(full)
            assert reported(step) == reported(full)
            assert step.next_offset == full.next_offset
        assert any(reported(reader.read(s))[0] for s in ids), "the mix has rejects"
        assert any(reported(reader.read(s))[1] for s in ids), "the mix has skipped messages"
    finally:
        reader.close()


def test_continuing_a_read_leaves_it_unchanged_and_refuses_another_saga(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    ids = write_mix(kafka_bootstrap, topic, partitions=1, sagas=2, events=60, seed=11)
    reader = SagaReader({"bootstrap.servers": kafka_bootstrap}, topic, partitions=1)
    try:
        first = reader.read(ids[0], until_offset=20)
        snapshot = accepted(first), reported(first), first.next_offset
        reader.read(ids[0], resume=first)
        assert (accepted(first), reported(first), first.next_offset) == snapshot
        with pytest.raises(ValueError, match="cannot continue a read of saga"):
            reader.read(ids[1], resume=first)
    finally:
        reader.close()


def _fill(bootstrap: str, topic: str, n: int) -> None:
    """``n`` messages of unrelated sagas in partition 0 (a big partition)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        producer.produce(topic, key=f"other-{i}".encode(), value=b"x", partition=0)
    assert producer.flush(30) == 0


def test_opening_a_saga_reads_its_partition_once(
    kafka_bootstrap: str, make_topic: Callable[..., str], journal_factory: JournalFactory
) -> None:
    topic = make_topic(partitions=1)
    _fill(kafka_bootstrap, topic, 3000)
    journal = journal_factory(topic)
    sagacity = Sagacity(journal, compensation="delegated")
    reader = journal.reader
    saga = f"open-{uuid.uuid4().hex}"
    before = reader.messages_read
    result = sagacity.saga(saga, lambda: None)
    cost = reader.messages_read - before
    assert result.status.value == "COMPLETED"
    # One pass over the partition (3000 messages) for the existence check; the open's own
    # read and read-back continue from there (a full re-read would be 6000+).
    assert 3000 <= cost < 3100, cost
    events = [e.event_type for e in journal.read(saga).entries]
    assert events[0] is EventType.SAGA_OPENED
    assert events[-1] is EventType.SAGA_ENDED


def test_a_confirmed_append_after_a_read_reads_only_the_new_messages(
    kafka_bootstrap: str, make_topic: Callable[..., str], journal_factory: JournalFactory
) -> None:
    topic = make_topic(partitions=1)
    _fill(kafka_bootstrap, topic, 2000)
    writer = journal_factory(topic)
    saga = f"decide-{uuid.uuid4().hex}"
    writer.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    writer.append(
        EntryDraft(saga_id=saga, event_type=EventType.AWAITING_APPROVAL, tool="t", payload="{}")
    )
    writer.flush()
    decider = journal_factory(topic)
    tail = decider.read(saga).tail[0]
    assert partition_for(saga.encode(), 1) == 0
    _fill(kafka_bootstrap, topic, 50)
    before = decider.reader.messages_read
    entry = decider.append_after(
        EntryDraft(saga_id=saga, event_type=EventType.APPROVED, actor="alice"), after_seq=tail
    )
    assert entry.seq == tail + 1
    assert decider.reader.messages_read - before <= 52  # the 50 new messages and its own
    assert [e.hash for e in decider.read(saga).entries] == [
        e.hash for e in journal_factory(topic).reader.read(saga).entries
    ]
