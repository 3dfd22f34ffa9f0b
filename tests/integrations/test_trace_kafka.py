"""The Kafka journal's trace context of an event: the header of the accepted event only."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sagacity import Sagacity
from sagacity.producer import KafkaJournal, traced
from sagacity.schemas import encode_entry
from tests.integrations.travel_tools import Travel

pytestmark = [pytest.mark.kafka]

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
DECOY = "00-11111111111111111111111111111111-2222222222222222-01"


def test_a_decision_continues_the_accepted_requests_trace_not_a_copys(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    with KafkaJournal(kafka_bootstrap, topic=topic) as journal:
        agent = Sagacity(journal, compensation="delegated")
        tools = agent.wrap(Travel())
        with traced(GOOD):
            result = agent.saga("trip-k", lambda: tools.pay(10))
        seq = result.awaiting_seq
        assert seq is not None
        request = next(e for e in journal.entries("trip-k") if e.seq == seq)
        # Anyone who can write the topic re-sends the request's bytes under another trace.
        decoy = Producer({"bootstrap.servers": kafka_bootstrap})
        decoy.produce(
            topic, value=encode_entry(request), key=b"trip-k", headers=[("traceparent", DECOY)]
        )
        decoy.flush(10)
    with KafkaJournal(kafka_bootstrap, topic=topic) as reader:
        assert [r.kind.value for r in reader.read("trip-k").rejected] == ["duplicate"]
        assert reader.traceparent_of("trip-k", seq) == GOOD
        assert reader.traceparent_of("trip-k", seq + 100) is None
