"""The journal contract, run against KafkaJournal on a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sagacity.producer import KafkaJournal
from tests.contract.journal_contract import JournalContract

pytestmark = pytest.mark.kafka


class TestKafkaJournalContract(JournalContract):
    @pytest.fixture
    def make_journal(
        self, kafka_bootstrap: str, make_topic: Callable[..., str]
    ) -> Callable[[], KafkaJournal]:
        return lambda: KafkaJournal(kafka_bootstrap, topic=make_topic(partitions=3))
