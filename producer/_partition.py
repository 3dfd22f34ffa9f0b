"""Kafka's default partitioner (murmur2 of the key), so every client agrees where a saga lives.

The Java client, librdkafka's ``murmur2_random`` partitioner and this module map a key to the
same partition; readers compute a saga's partition instead of scanning the whole topic.
"""

from __future__ import annotations

from sagacity.chain._acceptance import ForkKind

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of ``data`` (seed ``0x9747b28c``), as a signed int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - (length % 4)
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


WRONG_PARTITION: str = ForkKind.WRONG_PARTITION.value
"""The reason every consumer gives a message that is not on its key's partition (the core's
acceptance vocabulary, :class:`sagacity.chain._acceptance.ForkKind`)."""


def misplaced(key: bytes | None, partition: int, partitions: int) -> str | None:
    """Why a message read from ``partition`` of a topic of ``partitions`` is not where the
    journal's partitioner puts its key (``None``: it is).

    Every event of a saga is produced with the saga id as key, so it lands on
    :func:`partition_for` of that key (docs/adr/0004-single-writer.md): that one partition's
    offset order is the order every reader accepts events in.  A message elsewhere — produced
    to a chosen partition, or with another partitioner — is seen by no reader that reads the
    saga's partition: it is foreign, quarantined with :data:`WRONG_PARTITION`, never folded or
    archived.  A message without a key belongs to no saga and is left to the caller's other
    checks.
    """
    if key is None or partitions < 1:
        return None
    expected = partition_for(key, partitions)
    if expected == partition:
        return None
    return (
        f"the message is on partition {partition}, but its key belongs on partition "
        f"{expected} of {partitions} (murmur2): no reader of the saga sees it there"
    )


class KafkaPartitioner:
    """The journal's partitioner as the :class:`sagacity.ports.Partitioner` port: the
    composition root hands it to the archive, which checks each message's placement."""

    def partition_for(self, key: bytes, partitions: int) -> int:
        """:func:`partition_for`."""
        return partition_for(key, partitions)

    def misplaced(self, key: bytes | None, partition: int, partitions: int) -> str | None:
        """:func:`misplaced`."""
        return misplaced(key, partition, partitions)


KAFKA_PARTITIONER = KafkaPartitioner()
"""The journal's partitioner (murmur2 of the key)."""
