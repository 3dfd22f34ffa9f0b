"""A saga's opening sent twice: a resend that finds its own identical first copy on the topic
carries on; a different opening at that seq still conflicts (real broker).

A broker fault can leave a send unanswered after its first copy was written; the producer
sends the event again and the partition holds it twice, the acknowledgement naming the second
copy.  :class:`ResendingProducer` makes that happen on demand: before the journal's own send of
the first ``SAGA_OPENED`` it writes a first copy (identical, or altered to stand for another
send), whose acknowledgement never reaches the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import Producer

from sagacity import (
    EntryDraft,
    EventType,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    verify,
)
from sagacity.errors import WriterConflictError
from sagacity.producer import KafkaJournal
from sagacity.schemas import decode_entry, encode_entry

pytestmark = pytest.mark.kafka

JournalFactory = Callable[..., KafkaJournal]


class ResendingProducer:
    """The journal's producer, writing a first copy of the first ``SAGA_OPENED`` before the
    journal's own send of it (``alter`` changes that copy's content; ``None``: identical)."""

    def __init__(self, producer: Any, alter: Callable[[bytes], bytes] | None = None) -> None:
        self._producer = producer
        self._alter = alter
        self.first_copies = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def produce(self, topic: str, **message: Any) -> None:
        headers = message["headers"]
        if not self.first_copies and ("event_type", b"SAGA_OPENED") in headers:
            value = message["value"] if self._alter is None else self._alter(message["value"])
            first = {k: v for k, v in message.items() if k != "on_delivery"}
            self._producer.produce(topic, **{**first, "value": value})
            assert self._producer.flush(10) == 0
            self.first_copies += 1
        self._producer.produce(topic, **message)


def _resending(
    journal: KafkaJournal, alter: Callable[[bytes], bytes] | None = None
) -> ResendingProducer:
    producer = ResendingProducer(journal._producer, alter)
    journal._producer = cast(Producer, producer)  # publishing goes through it from now on
    return producer


def test_a_resent_saga_opened_finding_its_first_copy_carries_on(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic, writer_id="agent-1")
    producer = _resending(journal)

    opened = journal.append(EntryDraft(saga_id="resent-open", event_type=EventType.SAGA_OPENED))
    intent = journal.append(
        EntryDraft(saga_id="resent-open", event_type=EventType.INTENT, tool="t", payload="{}")
    )

    assert producer.first_copies == 1
    assert (opened.seq, intent.seq) == (1, 2)
    read = journal_factory(topic).read("resent-open")
    assert [e.hash for e in read.entries] == [opened.hash, intent.hash]
    assert verify(read.entries, saga_id="resent-open").ok
    # The partition holds both copies; the chain accepts the first, the second is a duplicate.
    assert len(read.rejected) == 1


def test_a_saga_run_whose_opening_was_resent_completes(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    _resending(journal)
    agent = Sagacity(journal)
    step = agent.wrap_tool(lambda: "done", name="step", reversibility=Reversibility.READ)

    result = agent.saga("resent-run", step)

    assert result.status is SagaStatus.COMPLETED
    kinds = [e.event_type for e in journal_factory(topic).read("resent-run").entries]
    assert kinds == [E.SAGA_OPENED, E.INTENT, E.EXECUTED, E.SAGA_ENDED]


def test_another_saga_opened_at_that_seq_still_conflicts(
    topic: str, journal_factory: JournalFactory
) -> None:
    def later(value: bytes) -> bytes:
        # The same writer's opening, sent at another time: another event, not this one.
        entry = decode_entry(value)
        draft = EntryDraft(
            saga_id=entry.saga_id,
            event_type=entry.event_type,
            actor=entry.actor,
            attributes=dict(entry.attributes),
            recorded_at_us=entry.recorded_at_us + 1,
        )
        return encode_entry(InMemoryJournal().append(draft))

    journal = journal_factory(topic, writer_id="agent-1")
    _resending(journal, later)

    with pytest.raises(WriterConflictError, match="first"):
        journal.append(EntryDraft(saga_id="other-open", event_type=EventType.SAGA_OPENED))


E = EventType
