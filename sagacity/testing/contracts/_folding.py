"""The contract every :class:`~sagacity.ports.FoldingRequestStore` meets; subclass it per adapter.

The approvals request consumer folds a batch of the topic and stores its positions in one
unit (:meth:`~sagacity.ports.FoldingRequestStore.folding`, a :class:`~sagacity.ports.
RequestFold`): what the batch folded, quarantined and positioned is kept together when the
block returns, and none of it when the block raises, so a batch read again after a failure
folds as if the first attempt never happened.  A subclass provides
:meth:`FoldingRequestStoreContract.create_store`: a store on a fresh database, its tables not
yet created.
"""

from __future__ import annotations

import abc

import pytest

from sagacity.chain._acceptance import ForkKind, Refusal, Tail
from sagacity.ports import Fault, FoldingRequestStore, RequestStore, RowState
from sagacity.testing.contracts._chains import E, _Chain

TOPIC_PARTITION = 3


class _BatchFailedError(Exception):
    """Raised inside a batch: the batch must leave nothing behind."""


def _failing_batch(store: FoldingRequestStore, chain: _Chain, decoy: _Chain) -> None:
    """A batch that folds ``chain``, is refused ``decoy``, quarantines a fault and stores a
    position, then fails."""
    with store.folding() as batch:
        for offset, entry in enumerate(chain.entries):
            batch.fold(entry, saga_id=chain.saga_id, position=(0, offset))
        refused = batch.fold(decoy.entries[0], saga_id=chain.saga_id, position=(0, 9))
        assert isinstance(refused, Refusal)
        fault = Fault(kind="authentication failed", detail="d")
        batch.quarantine(chain.entries[0], fault, saga_id=chain.saga_id, position=None)
        batch.store_offset(store.topic, 0, 10)
        raise _BatchFailedError


class FoldingRequestStoreContract(abc.ABC):
    """A batch of the request consumer: folds, quarantines and positions, kept as one."""

    @abc.abstractmethod
    def create_store(self) -> FoldingRequestStore:
        """A store on a fresh database, its tables not yet created."""

    @pytest.fixture
    def store(self) -> FoldingRequestStore:
        """A store from :meth:`create_store`, migrated."""
        store = self.create_store()
        store.migrate()
        return store

    def test_it_implements_the_protocol(self, store: FoldingRequestStore) -> None:
        assert isinstance(store, FoldingRequestStore)
        assert isinstance(store, RequestStore)

    def test_a_batch_keeps_its_folds_and_positions_together(
        self, store: FoldingRequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        assert store.offsets(store.topic) == {}
        with store.folding() as batch:
            for offset, entry in enumerate(chain.entries):
                outcome = batch.fold(
                    entry, saga_id=chain.saga_id, position=(TOPIC_PARTITION, offset)
                )
                assert outcome is None
            batch.store_offset(store.topic, TOPIC_PARTITION, len(chain.entries))
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert row.state is RowState.PENDING
        assert store.offsets(store.topic) == {TOPIC_PARTITION: len(chain.entries)}
        assert store.offsets(f"{store.topic}-other") == {}

    def test_a_batch_that_raises_keeps_nothing_and_folds_the_same_when_read_again(
        self, store: FoldingRequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        decoy = _Chain(chain.saga_id)  # another chain under the same key: refused on a fold
        decoy.add(E.SAGA_OPENED, after_us=7)
        with pytest.raises(_BatchFailedError):
            _failing_batch(store, chain, decoy)
        assert store.get(chain.saga_id, seq) is None
        assert store.quarantined(saga_id=chain.saga_id) == []
        assert store.offsets(store.topic) == {}
        # The saga's tail did not move: the batch read again folds as the first attempt would.
        with store.folding() as batch:
            for offset, entry in enumerate(chain.entries):
                assert batch.fold(entry, saga_id=chain.saga_id, position=(0, offset)) is None
            batch.store_offset(store.topic, 0, len(chain.entries))
        assert store.get(chain.saga_id, seq) is not None
        assert store.offsets(store.topic) == {0: len(chain.entries)}

    def test_a_refused_message_is_quarantined_with_its_position_and_the_batch_goes_on(
        self, store: FoldingRequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        decoy = _Chain(chain.saga_id)
        decoy.add(E.SAGA_OPENED, after_us=7)
        other = _Chain()
        other.add(E.SAGA_OPENED)
        seq = other.request()
        with store.folding() as batch:
            assert batch.fold(chain.entries[0], saga_id=chain.saga_id, position=(1, 0)) is None
            refused = batch.fold(decoy.entries[0], saga_id=chain.saga_id, position=(1, 1))
            misplaced = batch.fold(
                other.entries[0], saga_id=other.saga_id, placed=False, position=(1, 2)
            )
            for offset, entry in enumerate(other.entries, start=3):
                assert batch.fold(entry, saga_id=other.saga_id, position=(1, offset)) is None
            batch.store_offset(store.topic, 1, 3 + len(other.entries))
        assert isinstance(refused, Refusal)
        assert refused.kind is ForkKind.FORK
        assert isinstance(misplaced, Refusal)
        assert misplaced.kind is ForkKind.WRONG_PARTITION
        found = {(q.saga_id, q.kind, q.partition, q.offset) for q in store.quarantined()}
        assert found == {
            (chain.saga_id, ForkKind.FORK.value, 1, 1),
            (other.saga_id, ForkKind.WRONG_PARTITION.value, 1, 2),
        }
        assert store.get(other.saga_id, seq) is not None
        assert store.offsets(store.topic) == {1: 3 + len(other.entries)}

    def test_a_duplicate_is_dropped_quietly(self, store: FoldingRequestStore) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        with store.folding() as batch:
            assert batch.fold(chain.entries[0], saga_id=chain.saga_id, position=(0, 0)) is None
            again = batch.fold(chain.entries[0], saga_id=chain.saga_id, position=(0, 1))
        assert isinstance(again, Refusal)
        assert again.kind is ForkKind.DUPLICATE
        assert store.quarantined(saga_id=chain.saga_id) == []

    def test_a_saga_first_seen_past_its_start_needs_its_prefix(
        self, store: FoldingRequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        first, late = chain.entries
        with store.folding() as batch:
            unknown = batch.fold(late, saga_id=chain.saga_id, prefix=lambda: None)
        assert isinstance(unknown, Refusal)
        assert unknown.kind is ForkKind.UNKNOWN_PREFIX
        assert store.get(chain.saga_id, seq) is None
        with store.folding() as batch:
            read = batch.fold(
                late, saga_id=chain.saga_id, prefix=lambda: Tail(seq=first.seq, hash=first.hash)
            )
        assert read is None
        assert store.get(chain.saga_id, seq) is not None

    def test_a_fault_is_quarantined_with_its_kind_once_per_position(
        self, store: FoldingRequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        fault = Fault(kind="authentication failed", detail="the sealed field does not open")
        with store.folding() as batch:
            kept = batch.quarantine(chain.entries[0], fault, saga_id=chain.saga_id, position=(2, 5))
            again = batch.quarantine(
                chain.entries[0], fault, saga_id=chain.saga_id, position=(2, 5)
            )
        assert kept is True
        assert again is True
        [found] = store.quarantined(saga_id=chain.saga_id)
        assert (found.kind, found.detail, found.seq, found.partition, found.offset) == (
            "authentication failed",
            "the sealed field does not open",
            1,
            2,
            5,
        )
        # Set aside for its own fault, not folded: the saga's chain has not started.
        with store.folding() as batch:
            assert batch.fold(chain.entries[0], saga_id=chain.saga_id) is None

    def test_a_position_never_moves_back(self, store: FoldingRequestStore) -> None:
        with store.folding() as batch:
            batch.store_offset(store.topic, 0, 40)
            batch.store_offset(store.topic, 1, 7)
        with store.folding() as batch:
            batch.store_offset(store.topic, 0, 12)  # a former owner's late batch
            batch.store_offset(store.topic, 1, 8)
        assert store.offsets(store.topic) == {0: 40, 1: 8}
