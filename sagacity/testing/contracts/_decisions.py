"""The request store's unit of work for a decision (:meth:`~sagacity.ports.RequestStore.deciding`),
part of the request store's contract (:class:`RequestStoreContract` runs these too).

Another unit is always run on another thread, as another replica's decision would be.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from sagacity.errors import DecisionInProgressError
from sagacity.ports import RequestStore, RowState
from sagacity.testing.contracts._chains import E, _Chain

T = TypeVar("T")


def _elsewhere(call: Callable[[], T]) -> T | BaseException:
    """``call()``'s result (or what it raised), computed on another thread."""
    out: list[T | BaseException] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert out, "the call did not return"
    return out[0]


class RequestDecisionContract(abc.ABC):
    """A decision's unit of work: it folds the chain, holds the request's lock against every
    other unit until it ends, and releases it however it ends."""

    @abc.abstractmethod
    def create_store(self) -> RequestStore:
        """As :meth:`RequestStoreContract.create_store`."""

    @pytest.fixture
    def store(self) -> RequestStore:
        """A store from :meth:`create_store`, migrated."""
        store = self.create_store()
        store.migrate()
        return store

    def _requested(self, store: RequestStore) -> tuple[_Chain, int]:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        with store.deciding() as unit:
            unit.fold(chain.saga_id, chain.entries)
        return chain, seq

    def test_a_unit_folds_the_chain_and_reads_it(self, store: RequestStore) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        with store.deciding() as unit:
            assert unit.get(chain.saga_id, seq) is None
            unit.fold(chain.saga_id, chain.entries)
            unit.fold(chain.saga_id, chain.entries)  # what is held already is skipped
            row = unit.get(chain.saga_id, seq, lock=True)
            assert row is not None
            assert (row.state, row.tool) == (RowState.PENDING, "wire")
        assert store.get(chain.saga_id, seq) == row
        chain.add(E.REJECTED, actor="bob", ref=seq)
        with store.deciding() as unit:
            unit.fold(chain.saga_id, chain.entries)
        after = store.get(chain.saga_id, seq)
        assert after is not None
        assert after.state is RowState.REJECTED

    def test_a_locked_request_is_not_taken_by_another_unit(self, store: RequestStore) -> None:
        chain, seq = self._requested(store)

        def lock_elsewhere() -> object:
            with store.deciding(lock_timeout_s=0.3) as other:
                return other.get(chain.saga_id, seq, lock=True)

        def try_elsewhere() -> object:
            with store.deciding() as other:
                return other.lock_open(chain.saga_id, seq)

        with store.deciding() as unit:
            assert unit.get(chain.saga_id, seq, lock=True) is not None
            assert unit.get(chain.saga_id, seq, lock=True) is not None  # the unit's own lock
            assert isinstance(_elsewhere(lock_elsewhere), DecisionInProgressError)
            assert _elsewhere(try_elsewhere) is False
        assert _elsewhere(try_elsewhere) is True
        assert _elsewhere(lock_elsewhere) is not None

    def test_the_lock_is_released_when_the_unit_raises(self, store: RequestStore) -> None:
        chain, seq = self._requested(store)

        def fail() -> None:
            with store.deciding() as unit:
                assert unit.lock_open(chain.saga_id, seq)
                raise RuntimeError("the decision failed")

        with pytest.raises(RuntimeError, match="the decision failed"):
            fail()

        def try_elsewhere() -> object:
            with store.deciding() as other:
                return other.lock_open(chain.saga_id, seq)

        assert _elsewhere(try_elsewhere) is True

    def test_only_an_open_request_is_locked_without_waiting(self, store: RequestStore) -> None:
        chain, seq = self._requested(store)
        with store.deciding() as unit:
            assert not unit.lock_open(chain.saga_id, seq + 1)  # no such request
        chain.add(E.REJECTED, actor="bob", ref=seq)
        with store.deciding() as unit:
            unit.fold(chain.saga_id, chain.entries)
        with store.deciding() as unit:
            assert not unit.lock_open(chain.saga_id, seq)  # closed
