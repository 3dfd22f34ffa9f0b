"""Where the journal's partitioner puts a saga's messages: the port of
``sagacity.producer`` (``KAFKA_PARTITIONER``) the archive checks a message's placement with.

Every event of a saga is produced with the saga id as key, so it lands on one partition; a
message elsewhere is seen by no reader of the saga (docs/adr/0004-single-writer.md).
"""

from __future__ import annotations

from typing import Protocol


class Partitioner(Protocol):
    """The topic's partitioner, for a topic of ``partitions`` partitions."""

    def partition_for(self, key: bytes, partitions: int) -> int:
        """The partition the journal produces a message keyed ``key`` to.

        Raises:
            ValueError: ``partitions`` is less than one.
        """
        ...

    def misplaced(self, key: bytes | None, partition: int, partitions: int) -> str | None:
        """Why a message keyed ``key`` read from ``partition`` is not where the partitioner
        puts it (``None``: it is, or it has no key)."""
        ...
