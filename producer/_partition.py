"""Kafka's default partitioner (murmur2 of the key), so every client agrees where a saga lives.

The Java client, librdkafka's ``murmur2_random`` partitioner and this module map a key to the
same partition; readers compute a saga's partition instead of scanning the whole topic.
"""

from __future__ import annotations

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
