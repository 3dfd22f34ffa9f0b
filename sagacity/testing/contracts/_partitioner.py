"""The contract every :class:`~sagacity.ports.Partitioner` meets; subclass it per adapter.

A subclass provides :meth:`PartitionerContract.create_partitioner`.  The partitioner is Kafka's
default one (murmur2 of the key, made positive, modulo the partition count): the expected
partitions below are those the Java client gives the keys of Kafka's own ``Utils.murmur2``
test vectors, written out as numbers so the suite holds no second copy of the rule.
"""

from __future__ import annotations

import abc

import pytest

from sagacity.ports import Partitioner

KNOWN = {
    b"21": {1: 0, 2: 0, 3: 0, 7: 3, 12: 0, 100: 40},
    b"foobar": {1: 0, 2: 0, 3: 0, 7: 0, 12: 6, 100: 66},
    b"a-little-bit-long-string": {1: 0, 2: 0, 3: 2, 7: 1, 12: 8, 100: 12},
    b"a-little-bit-longer-string": {1: 0, 2: 1, 3: 2, 7: 0, 12: 11, 100: 19},
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": {
        1: 0,
        2: 1,
        3: 2,
        7: 3,
        12: 5,
        100: 77,
    },
    b"abc": {1: 0, 2: 1, 3: 0, 7: 4, 12: 3, 100: 7},
}
"""Key -> partition count -> the partition Kafka's default partitioner picks."""

SAGA_KEYS = (*(f"saga-{i}".encode() for i in range(64)), b"", "sága-ü".encode())
"""Keys the totality and placement tests walk (the empty key and non-ASCII among them)."""


class PartitionerContract(abc.ABC):
    """Kafka's default partitioner, and the placement rule the archive checks with it."""

    @abc.abstractmethod
    def create_partitioner(self) -> Partitioner:
        """The partitioner under test."""

    @pytest.fixture
    def partitioner(self) -> Partitioner:
        return self.create_partitioner()

    @pytest.mark.parametrize("key", sorted(KNOWN))
    def test_it_puts_a_key_where_kafkas_default_partitioner_does(
        self, partitioner: Partitioner, key: bytes
    ) -> None:
        got = {n: partitioner.partition_for(key, n) for n in KNOWN[key]}
        assert got == KNOWN[key]

    def test_it_is_total_and_stable_over_the_partitions(self, partitioner: Partitioner) -> None:
        for partitions in (1, 2, 5, 12, 1000):
            for key in SAGA_KEYS:
                partition = partitioner.partition_for(key, partitions)
                assert isinstance(partition, int)
                assert 0 <= partition < partitions
                assert partitioner.partition_for(key, partitions) == partition

    def test_it_spreads_keys_over_every_partition(self, partitioner: Partitioner) -> None:
        assert {partitioner.partition_for(key, 4) for key in SAGA_KEYS} == {0, 1, 2, 3}

    @pytest.mark.parametrize("partitions", [0, -1])
    def test_it_refuses_fewer_than_one_partition(
        self, partitioner: Partitioner, partitions: int
    ) -> None:
        with pytest.raises(ValueError, match="partition"):
            partitioner.partition_for(b"saga-1", partitions)

    def test_a_message_is_misplaced_exactly_off_its_keys_partition(
        self, partitioner: Partitioner
    ) -> None:
        for partitions in (1, 3, 7):
            for key in SAGA_KEYS:
                home = partitioner.partition_for(key, partitions)
                for partition in range(partitions):
                    why = partitioner.misplaced(key, partition, partitions)
                    if partition == home:
                        assert why is None
                    else:
                        assert isinstance(why, str)
                        assert why.strip()

    def test_a_keyless_message_is_never_misplaced(self, partitioner: Partitioner) -> None:
        for partitions in (1, 3, 7):
            for partition in range(partitions):
                assert partitioner.misplaced(None, partition, partitions) is None
