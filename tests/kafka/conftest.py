"""Fixtures for the Kafka journal's tests: journals on fresh topics, closed afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity.errors import SagacityError
from sagacity.producer import KafkaJournal


@pytest.fixture
def journal_factory(kafka_bootstrap: str) -> Iterator[Callable[..., KafkaJournal]]:
    """``journal_factory(topic, **options) -> KafkaJournal``; every journal is closed after."""
    made: list[KafkaJournal] = []

    def make(topic: str, **options: Any) -> KafkaJournal:
        options.setdefault("ack_timeout_s", 10.0)
        journal = KafkaJournal(kafka_bootstrap, topic=topic, **options)
        made.append(journal)
        return journal

    yield make
    for journal in made:
        with contextlib.suppress(SagacityError):
            journal.close()


@pytest.fixture
def topic(make_topic: Callable[..., str]) -> str:
    """A fresh journal topic with 6 partitions."""
    return make_topic(partitions=6)
