"""The journal contract, run against KafkaJournal on a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sagacity.producer import KafkaJournal
from sagacity.testing.contracts import JournalContract

pytestmark = pytest.mark.kafka


class TestKafkaJournalContract(JournalContract):
    @pytest.fixture(autouse=True)
    def _broker(self, kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
        self.bootstrap, self.make_topic = kafka_bootstrap, make_topic

    def create_journal(self) -> KafkaJournal:
        return KafkaJournal(self.bootstrap, topic=self.make_topic(partitions=3))
