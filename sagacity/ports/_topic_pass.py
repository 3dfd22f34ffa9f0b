"""One pass over the journal topic, outside any consumer group's assignment: the port of
``sagacity.producer`` (``KafkaTopicPasses``) that the archive's own readers of the topic (the
catch-up of ``sagacity archive checkpoint``, the replay of ``sagacity audit replay``) read with.

A pass assigns itself the partitions it reads (it joins no group and commits nothing), learns
where each partition starts and ends when it begins, and reads each from a chosen offset up to
that end: what was acknowledged before the pass began is read, nothing after.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, kw_only=True)
class TopicMessage:
    """One message of the topic, as a pass reads it.

    Attributes:
        partition / offset: where it is.
        key / value: its bytes (``None`` where it has none).
        headers: its headers with bytes values.
    """

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PartitionBounds:
    """Where one partition starts (``low``: retention removed what was before) and ends
    (``high``: the offset after its last message) when the pass began."""

    partition: int
    low: int
    high: int


class TopicPass(Protocol):
    """One pass over one topic (see the module); a context manager closes it."""

    def bounds(self) -> list[PartitionBounds]:
        """Every partition of the topic, with where it starts and ends now.

        Raises:
            TopicNotFoundError: the topic does not exist or has no partitions.
            JournalUnavailableError: the broker could not say.
        """
        ...

    def read(
        self,
        starts: Mapping[int, int | None],
        ends: Mapping[int, int],
        *,
        within_s: float | None = None,
        idle_s: float | None = None,
    ) -> Iterator[list[TopicMessage]]:
        """The messages of each partition of ``starts`` from its start (``None``: its
        beginning) up to its end in ``ends``, in batches, each partition in offset order.

        Raises:
            JournalUnavailableError: the ends were not reached within ``within_s`` seconds
                (in all) or ``idle_s`` seconds without a message, or the broker failed.
            KafkaAccessDeniedError: the principal may not read the topic.
        """
        ...


class TopicPasses(Protocol):
    """Opens a pass over ``topic`` with the client settings ``config`` (the transport's: its
    servers, group name and credentials); ``timeout_s`` bounds each question to the broker."""

    def __call__(
        self, topic: str, *, config: Mapping[str, Any], timeout_s: float
    ) -> AbstractContextManager[TopicPass]: ...
