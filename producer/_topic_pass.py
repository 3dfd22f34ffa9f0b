"""One pass over the journal topic outside any consumer group's assignment: the
:class:`sagacity.ports.TopicPasses` the composition root hands the archive's own readers of the
topic (the catch-up before a signing, the replay of an audit).

The pass assigns itself its partitions, so it joins no group and commits nothing; it reads each
partition from a chosen offset up to the end it found when it began.  A transaction's commit
marker takes an offset but is never delivered: a partition is read to its end once the
consumer's position reaches it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from sagacity.errors import JournalUnavailableError, TopicNotFoundError
from sagacity.ports import PartitionBounds, TopicMessage
from sagacity.producer._clients import topic_unreadable, with_logger
from sagacity.producer._denied import access_denied


def _headers(message: Any) -> dict[str, bytes]:
    return {k: v for k, v in (message.headers() or ()) if isinstance(v, bytes)}


class KafkaTopicPass:
    """One pass over ``topic`` on a consumer of its own (see the module).

    Args:
        topic: the topic.
        config: librdkafka settings (servers, group name, credentials).
        timeout_s: the longest each question to the broker may take.
    """

    def __init__(self, topic: str, *, config: Mapping[str, Any], timeout_s: float) -> None:
        self._topic = topic
        self._config = dict(config)
        self._timeout = timeout_s
        self._consumer = Consumer(with_logger(self._config))

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()

    def bounds(self) -> list[PartitionBounds]:
        """Every partition of the topic with its watermarks now.

        Raises:
            TopicNotFoundError: the topic does not exist or has no partitions.
            JournalUnavailableError: the broker did not answer.
        """
        try:
            metadata = self._consumer.list_topics(self._topic, timeout=self._timeout)
        except KafkaException as exc:
            bootstrap = self._config.get("bootstrap.servers", "?")
            raise topic_unreadable(self._topic, bootstrap, exc) from exc
        info = metadata.topics.get(self._topic)
        if info is None or info.error is not None or not info.partitions:
            raise TopicNotFoundError(
                f"topic {self._topic!r} does not exist or has no partitions", topic=self._topic
            )
        found = []
        for number in sorted(info.partitions):
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self._topic, number), timeout=self._timeout
            )
            found.append(PartitionBounds(partition=number, low=int(low), high=int(high)))
        return found

    def read(
        self,
        starts: Mapping[int, int | None],
        ends: Mapping[int, int],
        *,
        within_s: float | None = None,
        idle_s: float | None = None,
    ) -> Iterator[list[TopicMessage]]:
        """The messages of each partition of ``starts`` from its start (``None``: its
        beginning) to its end in ``ends``, in batches.

        Raises:
            JournalUnavailableError: the ends were not reached in time, or reading failed.
            KafkaAccessDeniedError: the principal may not read the topic.
        """
        left = {p: ends[p] for p in starts}
        self._consumer.assign(
            [
                TopicPartition(self._topic, p, OFFSET_BEGINNING if start is None else start)
                for p, start in starts.items()
            ]
        )
        deadline = None if within_s is None else time.monotonic() + within_s
        idle = 0.0
        while left:
            if deadline is not None and time.monotonic() > deadline:
                raise JournalUnavailableError(
                    f"partitions {sorted(left)} of {self._topic!r} were not read to their end "
                    f"in {within_s:g} s"
                )
            if idle_s is not None and idle >= idle_s:
                raise JournalUnavailableError(
                    f"topic {self._topic!r} not read to its end in {idle_s} s"
                )
            messages = self._consumer.consume(num_messages=1000, timeout=0.5)
            idle = idle + 0.5 if not messages else 0.0
            batch = self._batch(messages, left)
            if batch:
                yield batch
            if left:
                self._reached(left)

    def _batch(self, messages: list[Any], left: dict[int, int]) -> list[TopicMessage]:
        """The messages before their partition's end; a partition whose end is reached
        leaves ``left``."""
        batch = []
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                doing = f"reading topic {self._topic!r}"
                denied = access_denied(error, self._config, doing=doing)
                raise denied or JournalUnavailableError(f"reading {self._topic!r} failed: {error}")
            partition, offset = m.partition() or 0, m.offset() or 0
            if partition not in left or offset >= left[partition]:
                continue
            batch.append(
                TopicMessage(
                    partition=partition,
                    offset=offset,
                    key=m.key(),
                    value=m.value(),
                    headers=_headers(m),
                )
            )
            if offset + 1 >= left[partition]:
                del left[partition]
        return batch

    def _reached(self, left: dict[int, int]) -> None:
        """Drop from ``left`` the partitions whose position passed their end (a commit
        marker last)."""
        positions = self._consumer.position([TopicPartition(self._topic, p) for p in left])
        for tp in positions:
            if tp.offset is not None and tp.offset >= left.get(tp.partition, tp.offset + 1):
                del left[tp.partition]


class KafkaTopicPasses:
    """Opens :class:`KafkaTopicPass` es (the :class:`sagacity.ports.TopicPasses` port)."""

    @contextmanager
    def __call__(
        self, topic: str, *, config: Mapping[str, Any], timeout_s: float
    ) -> Iterator[KafkaTopicPass]:
        """A pass over ``topic``, closed on leaving."""
        opened = KafkaTopicPass(topic, config=config, timeout_s=timeout_s)
        try:
            yield opened
        finally:
            opened.close()
