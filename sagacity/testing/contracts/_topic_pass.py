"""The contract every :class:`~sagacity.ports.TopicPasses` meets; subclass it per adapter.

A subclass provides, on a broker of the test's:

- :meth:`TopicPassesContract.create_passes`: the passes under test;
- :meth:`TopicPassesContract.create_topic`: a fresh topic of that many partitions;
- :meth:`TopicPassesContract.client_config`: the client settings a pass is opened with;
- :meth:`TopicPassesContract.produce`: writes messages to chosen partitions (in one committed
  transaction if asked) and returns them as the broker placed them, with their offsets.

A pass reads only what it was told to, up to the ends it is given: the tests take the ends from
:meth:`~sagacity.ports.TopicPass.bounds`, as the archive's readers do.
"""

from __future__ import annotations

import abc
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest

from sagacity.errors import JournalUnavailableError, TopicNotFoundError
from sagacity.ports import TopicMessage, TopicPass, TopicPasses

TIMEOUT_S = 10.0
"""What each question to the broker may take."""

WITHIN_S = 30.0
"""What a read that must end may take (it ends long before on a healthy broker)."""


@dataclass(frozen=True, kw_only=True)
class OutgoingMessage:
    """A message a test writes to ``partition``."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] = field(default_factory=dict)


def _messages(partition: int, count: int, *, tag: str = "m") -> list[OutgoingMessage]:
    return [
        OutgoingMessage(
            partition=partition,
            key=f"saga-{partition}".encode(),
            value=f"{tag}-{partition}-{i}".encode(),
            headers={"n": str(i).encode()},
        )
        for i in range(count)
    ]


def _by_partition(messages: Sequence[TopicMessage]) -> dict[int, list[TopicMessage]]:
    found: dict[int, list[TopicMessage]] = {}
    for m in messages:
        found.setdefault(m.partition, []).append(m)
    return found


class TopicPassesContract(abc.ABC):
    """Bounds of every partition; a read of exactly the offsets asked for, that ends."""

    @abc.abstractmethod
    def create_passes(self) -> TopicPasses:
        """The passes under test."""

    @abc.abstractmethod
    def create_topic(self, partitions: int) -> str:
        """A fresh, empty topic of ``partitions`` partitions."""

    @abc.abstractmethod
    def client_config(self) -> Mapping[str, Any]:
        """The client settings a pass is opened with (servers, group name, credentials)."""

    @abc.abstractmethod
    def produce(
        self, topic: str, messages: Sequence[OutgoingMessage], *, transactional: bool = False
    ) -> list[TopicMessage]:
        """Write ``messages`` (in one committed transaction if ``transactional``); the
        messages as written, with the offsets the broker gave them, in the order given."""

    @pytest.fixture
    def passes(self) -> TopicPasses:
        return self.create_passes()

    def _open(self, passes: TopicPasses, topic: str) -> AbstractContextManager[TopicPass]:
        return passes(topic, config=self.client_config(), timeout_s=TIMEOUT_S)

    @staticmethod
    def _read_all(
        scan: TopicPass, starts: Mapping[int, int | None], ends: Mapping[int, int]
    ) -> list[TopicMessage]:
        batches: Iterator[list[TopicMessage]] = scan.read(starts, ends, within_s=WITHIN_S)
        return [m for batch in batches for m in batch]

    def test_the_bounds_list_every_partition(self, passes: TopicPasses) -> None:
        topic = self.create_topic(3)
        self.produce(topic, _messages(1, 4))
        with self._open(passes, topic) as scan:
            bounds = scan.bounds()
        assert sorted(b.partition for b in bounds) == [0, 1, 2]
        assert all(0 <= b.low <= b.high for b in bounds)
        assert {b.partition: b.high - b.low for b in bounds} == {0: 0, 1: 4, 2: 0}

    def test_a_read_gives_exactly_the_messages_up_to_the_ends(self, passes: TopicPasses) -> None:
        topic = self.create_topic(3)
        written = self.produce(topic, _messages(0, 5) + _messages(2, 3))
        written += self.produce(
            topic, [OutgoingMessage(partition=2, key=None, value=None)]
        )  # keyless and empty
        with self._open(passes, topic) as scan:
            bounds = {b.partition: b for b in scan.bounds()}
            got = self._read_all(scan, {0: None, 2: None}, {0: bounds[0].high, 2: bounds[2].high})
        assert _by_partition(got) == _by_partition(written), (got, written)

    def test_a_read_starts_and_ends_where_it_is_told(self, passes: TopicPasses) -> None:
        topic = self.create_topic(2)
        written = self.produce(topic, _messages(0, 6) + _messages(1, 6))
        offsets = {p: [m.offset for m in ms] for p, ms in _by_partition(written).items()}
        with self._open(passes, topic) as scan:
            got = self._read_all(scan, {0: offsets[0][2]}, {0: offsets[0][4]})
        assert got == [m for m in written if m.partition == 0][2:4]

    def test_nothing_written_after_the_bounds_is_read(self, passes: TopicPasses) -> None:
        topic = self.create_topic(1)
        before = self.produce(topic, _messages(0, 3, tag="before"))
        with self._open(passes, topic) as scan:
            ends = {b.partition: b.high for b in scan.bounds()}
            self.produce(topic, _messages(0, 3, tag="after"))
            got = self._read_all(scan, {0: None}, ends)
        assert got == before

    def test_a_read_ends_on_a_commit_marker(self, passes: TopicPasses) -> None:
        topic = self.create_topic(2)
        written = self.produce(topic, _messages(1, 3), transactional=True)
        with self._open(passes, topic) as scan:
            # The coordinator writes the commit marker after the commit returns: the bounds
            # are read until they hold it (the marker is then the last offset).
            deadline = time.monotonic() + 15.0
            bounds = {b.partition: b for b in scan.bounds()}
            while bounds[1].high <= written[-1].offset + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
                bounds = {b.partition: b for b in scan.bounds()}
            assert bounds[1].high > written[-1].offset + 1, "no commit marker within 15 s"
            got = self._read_all(scan, {1: None}, {1: bounds[1].high})
        assert got == written

    def test_a_missing_topic_has_no_bounds(self, passes: TopicPasses) -> None:
        with (
            self._open(passes, f"contract.missing.{uuid.uuid4().hex}") as scan,
            pytest.raises(TopicNotFoundError),
        ):
            scan.bounds()

    def test_an_end_not_reached_in_time_is_unavailable(self, passes: TopicPasses) -> None:
        topic = self.create_topic(1)
        self.produce(topic, _messages(0, 2))
        with self._open(passes, topic) as scan:
            high = scan.bounds()[0].high
            with pytest.raises(JournalUnavailableError):
                for _ in scan.read({0: None}, {0: high + 5}, within_s=2.0):
                    pass

    def test_a_read_idle_too_long_is_unavailable(self, passes: TopicPasses) -> None:
        topic = self.create_topic(1)
        self.produce(topic, _messages(0, 2))
        with self._open(passes, topic) as scan:
            high = scan.bounds()[0].high
            with pytest.raises(JournalUnavailableError):
                for _ in scan.read({0: None}, {0: high + 5}, idle_s=2.0):
                    pass
