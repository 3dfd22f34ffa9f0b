"""The contract every :class:`~sagacity.ports.ClaimStore` meets; subclass it per adapter.

A subclass provides :meth:`ClaimStoreContract.create_store`: a store on a fresh database for
each call.  Stores it creates are closed after the test.
"""

from __future__ import annotations

import abc
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from sagacity.ports import ClaimStatus, ClaimStore


def _saga() -> str:
    return f"contract-{uuid.uuid4().hex}"


def _in_thread(call: Callable[[], object]) -> object:
    """``call()``'s result, computed on another thread."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join(30)
    assert out, "the call did not return"
    return out[0]


class ClaimStoreContract(abc.ABC):
    """Claim once, learn what an earlier attempt got to, lock a saga per thread, prune."""

    @abc.abstractmethod
    def create_store(self) -> ClaimStore:
        """A store on a fresh database, its schema not yet ensured."""

    @pytest.fixture
    def store(self) -> Iterator[ClaimStore]:
        """A store from :meth:`create_store` with its schema, closed after the test."""
        store = self.create_store()
        store.ensure_schema()
        try:
            yield store
        finally:
            store.close()

    def test_it_implements_the_protocol(self, store: ClaimStore) -> None:
        assert isinstance(store, ClaimStore)
        assert store.ping() is True

    def test_ensure_schema_is_repeatable(self, store: ClaimStore) -> None:
        store.ensure_schema()
        assert store.claims(_saga()) == []

    def test_first_claim_is_fresh_the_second_finds_it(self, store: ClaimStore) -> None:
        saga = _saga()
        first = store.claim(saga, 3, target="refund", key="k3")
        assert (first.fresh, first.status, first.attempts) == (True, ClaimStatus.CLAIMED, 1)
        again = store.claim(saga, 3, target="refund", key="k3")
        assert (again.fresh, again.status, again.attempts) == (False, ClaimStatus.CLAIMED, 1)

    def test_a_compensated_claim_keeps_its_result(self, store: ClaimStore) -> None:
        saga = _saga()
        store.claim(saga, 2, target="refund", key="k")
        store.record(
            saga, 2, ClaimStatus.COMPENSATED, result='{"ok": true}', result_encoding="json"
        )
        found = store.claim(saga, 2, target="refund", key="k")
        assert not found.fresh
        assert found.status is ClaimStatus.COMPENSATED
        assert (found.result, found.result_encoding) == ('{"ok": true}', "json")

    def test_restart_counts_attempts_and_clears_the_error(self, store: ClaimStore) -> None:
        saga = _saga()
        store.claim(saga, 5, target="t", key="k")
        store.record(saga, 5, ClaimStatus.TIMED_OUT, error="no answer in 10s")
        (claim,) = store.claims(saga)
        assert (claim.status, claim.error) == (ClaimStatus.TIMED_OUT, "no answer in 10s")
        store.restart(saga, 5)
        (claim,) = store.claims(saga)
        assert (claim.status, claim.attempts, claim.error) == (ClaimStatus.CLAIMED, 2, None)

    def test_claims_are_per_saga_in_step_order(self, store: ClaimStore) -> None:
        saga, other = _saga(), _saga()
        for seq in (7, 2, 4):
            store.claim(saga, seq, target="t", key=f"k{seq}")
        store.claim(other, 1, target="t", key="k")
        store.record(saga, 4, ClaimStatus.FAILED, error="refused")
        claims = store.claims(saga)
        assert [c.step_seq for c in claims] == [2, 4, 7]
        assert [c.status for c in claims] == [
            ClaimStatus.CLAIMED,
            ClaimStatus.FAILED,
            ClaimStatus.CLAIMED,
        ]
        assert claims[1].error == "refused"
        assert all(c.saga_id == saga for c in claims)
        assert [c.saga_id for c in store.claims(other)] == [other]

    def test_a_saga_lock_excludes_other_threads_until_released(self, store: ClaimStore) -> None:
        saga = _saga()
        assert store.try_lock_saga(saga)
        assert _in_thread(lambda: store.try_lock_saga(saga)) is False
        assert _in_thread(lambda: store.try_lock_saga(_saga())) is True  # other sagas are free
        store.unlock_saga(saga)

        def take_and_release() -> bool:
            taken = store.try_lock_saga(saga)
            store.unlock_saga(saga)
            return taken

        assert _in_thread(take_and_release) is True

    def test_closing_releases_the_locks(self, store: ClaimStore) -> None:
        saga = _saga()
        assert store.try_lock_saga(saga)
        store.close()
        assert _in_thread(lambda: store.try_lock_saga(saga)) is True

    def test_prune_removes_only_settled_claims(self, store: ClaimStore) -> None:
        saga = _saga()
        for seq, status in enumerate(ClaimStatus, start=1):
            store.claim(saga, seq, target="t", key=f"k{seq}")
            if status is not ClaimStatus.CLAIMED:
                store.record(saga, seq, status)
        assert store.prune(older_than_s=3600, apply=False) == 0
        assert store.prune(older_than_s=0, apply=False) == 2
        assert len(store.claims(saga)) == 4  # counting deletes nothing
        assert store.prune(older_than_s=0, apply=True) == 2
        assert {c.status for c in store.claims(saga)} == {
            ClaimStatus.CLAIMED,
            ClaimStatus.TIMED_OUT,
        }
