"""The contract every :class:`~sagacity.ports.ClaimStore` meets; subclass it per adapter.

A subclass provides :meth:`ClaimStoreContract.create_store`: a store of a given journal on
the test's database (one fresh database per test, shared by every store the test makes), and
:meth:`ClaimStoreContract.put_unbound`: a claim as the database held it before claims named
their journal and step.  Stores it creates are closed after the test.
"""

from __future__ import annotations

import abc
import hashlib
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from sagacity.ports import ClaimStatus, ClaimStore

JOURNAL = "kafka:contract-cluster/journal-a"
"""The journal the contracts' stores serve: claims are keyed by it, signed decisions name it."""
OTHER_JOURNAL = "kafka:contract-cluster/journal-b"


def _saga() -> str:
    return f"contract-{uuid.uuid4().hex}"


def _hash(text: str) -> str:
    """An entry hash (64 lowercase hex) for a step named ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


H = _hash("step")
"""The step hash most tests claim with."""


def _in_thread(call: Callable[[], object]) -> object:
    """``call()``'s result, computed on another thread."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join(30)
    assert out, "the call did not return"
    return out[0]


class ClaimStoreContract(abc.ABC):
    """Claim once per journal and step, learn what an earlier attempt got to, never take
    another journal's or another entry's claim for a step's, lock a saga per thread, prune."""

    @abc.abstractmethod
    def create_store(self, *, journal: str = JOURNAL) -> ClaimStore:
        """A store of ``journal`` on the test's database, its schema not yet ensured.

        Raises:
            ValueError: ``journal`` is empty.
        """

    @abc.abstractmethod
    def put_unbound(
        self, store: ClaimStore, saga_id: str, step_seq: int, status: ClaimStatus
    ) -> None:
        """Put, in ``store``'s database, a claim of ``saga_id`` and ``step_seq`` written before
        claims named their journal and step (finished now unless ``CLAIMED``; a result when
        ``COMPENSATED``)."""

    @pytest.fixture
    def stores(self) -> Iterator[Callable[..., ClaimStore]]:
        """``stores(journal=...)``: stores from :meth:`create_store` with their schema, closed
        after the test."""
        made: list[ClaimStore] = []

        def make(*, journal: str = JOURNAL) -> ClaimStore:
            store = self.create_store(journal=journal)
            made.append(store)
            store.ensure_schema()
            return store

        try:
            yield make
        finally:
            for store in made:
                store.close()

    @pytest.fixture
    def store(self, stores: Callable[..., ClaimStore]) -> ClaimStore:
        """A store of :data:`JOURNAL` with its schema, closed after the test."""
        return stores()

    def test_it_implements_the_protocol(self, store: ClaimStore) -> None:
        assert isinstance(store, ClaimStore)
        assert store.ping() is True

    def test_ensure_schema_is_repeatable(self, store: ClaimStore) -> None:
        store.ensure_schema()
        assert store.claims(_saga()) == []

    def test_a_store_needs_its_journal(self) -> None:
        with pytest.raises(ValueError, match="journal"):
            self.create_store(journal="")

    @pytest.mark.parametrize("step_hash", ["", "ab" * 31, "AB" * 32, "g" * 64])
    def test_a_claim_is_keyed_by_an_entry_hash(self, store: ClaimStore, step_hash: str) -> None:
        saga = _saga()
        with pytest.raises(ValueError, match="entry hash"):
            store.claim(saga, 1, step_hash=step_hash, target="t", key="k")
        assert store.claims(saga) == []

    def test_first_claim_is_fresh_the_second_finds_it(self, store: ClaimStore) -> None:
        saga = _saga()
        first = store.claim(saga, 3, step_hash=H, target="refund", key="k3")
        assert (first.fresh, first.status, first.attempts) == (True, ClaimStatus.CLAIMED, 1)
        assert (first.step_hash, first.unbound) == (H, False)
        again = store.claim(saga, 3, step_hash=H, target="refund", key="k3")
        assert (again.fresh, again.status, again.attempts) == (False, ClaimStatus.CLAIMED, 1)

    def test_a_compensated_claim_keeps_its_result(self, store: ClaimStore) -> None:
        saga = _saga()
        store.claim(saga, 2, step_hash=H, target="refund", key="k")
        store.record(
            saga,
            2,
            ClaimStatus.COMPENSATED,
            step_hash=H,
            result='{"ok": true}',
            result_encoding="json",
        )
        found = store.claim(saga, 2, step_hash=H, target="refund", key="k")
        assert not found.fresh
        assert found.status is ClaimStatus.COMPENSATED
        assert (found.result, found.result_encoding) == ('{"ok": true}', "json")

    def test_another_journals_claim_is_never_this_ones(
        self, stores: Callable[..., ClaimStore]
    ) -> None:
        mine, theirs = stores(), stores(journal=OTHER_JOURNAL)
        saga = _saga()
        theirs.claim(saga, 2, step_hash=H, target="refund", key="k")
        theirs.record(saga, 2, ClaimStatus.COMPENSATED, step_hash=H, result="theirs")
        claim = mine.claim(saga, 2, step_hash=H, target="refund", key="k")
        assert (claim.fresh, claim.status, claim.result) == (True, ClaimStatus.CLAIMED, None)
        mine.record(saga, 2, ClaimStatus.FAILED, step_hash=H, error="refused")
        (own,) = mine.claims(saga)
        (other,) = theirs.claims(saga)
        assert (own.status, own.error, own.result) == (ClaimStatus.FAILED, "refused", None)
        assert (other.status, other.result) == (ClaimStatus.COMPENSATED, "theirs")
        mine.restart(saga, 2, step_hash=H)
        assert theirs.claims(saga)[0].attempts == 1  # a restart touches only its own journal

    def test_another_entry_at_the_same_seq_is_another_step(self, store: ClaimStore) -> None:
        saga, other = _saga(), _hash("another entry at seq 4")
        store.claim(saga, 4, step_hash=other, target="refund", key="k")
        store.record(saga, 4, ClaimStatus.COMPENSATED, step_hash=other, result="not yours")
        claim = store.claim(saga, 4, step_hash=H, target="refund", key="k")
        assert (claim.fresh, claim.status, claim.result) == (True, ClaimStatus.CLAIMED, None)
        store.record(saga, 4, ClaimStatus.TIMED_OUT, step_hash=H, error="no answer")
        by_hash = {c.step_hash: c for c in store.claims(saga)}
        assert by_hash[other].status is ClaimStatus.COMPENSATED
        assert by_hash[H].status is ClaimStatus.TIMED_OUT

    def test_an_unbound_claim_is_reported_but_never_its_result(
        self, stores: Callable[..., ClaimStore]
    ) -> None:
        store = stores()
        saga = _saga()
        self.put_unbound(store, saga, 5, ClaimStatus.COMPENSATED)
        found = store.claim(saga, 5, step_hash=H, target="refund", key="k")
        assert (found.fresh, found.unbound, found.status) == (False, True, ClaimStatus.COMPENSATED)
        assert (found.step_hash, found.result, found.result_encoding) == ("", None, None)
        # The step's own claim was made with it; the next attempt finds that one.
        again = store.claim(saga, 5, step_hash=H, target="refund", key="k")
        assert (again.fresh, again.unbound, again.status) == (False, False, ClaimStatus.CLAIMED)
        listed = store.claims(saga)
        assert [(c.step_seq, c.unbound, c.step_hash) for c in listed] == [
            (5, True, ""),
            (5, False, H),
        ]
        assert listed[0].result is None
        # Every journal sees it (it names none); another seq does not.
        assert stores(journal=OTHER_JOURNAL).claims(saga)[0].unbound
        assert store.claim(saga, 6, step_hash=H, target="t", key="k").fresh

    def test_restart_counts_attempts_and_clears_the_error(self, store: ClaimStore) -> None:
        saga = _saga()
        store.claim(saga, 5, step_hash=H, target="t", key="k")
        store.record(saga, 5, ClaimStatus.TIMED_OUT, step_hash=H, error="no answer in 10s")
        (claim,) = store.claims(saga)
        assert (claim.status, claim.error) == (ClaimStatus.TIMED_OUT, "no answer in 10s")
        store.restart(saga, 5, step_hash=H)
        (claim,) = store.claims(saga)
        assert (claim.status, claim.attempts, claim.error) == (ClaimStatus.CLAIMED, 2, None)

    def test_claims_are_per_saga_in_step_order(self, store: ClaimStore) -> None:
        saga, other = _saga(), _saga()
        for seq in (7, 2, 4):
            store.claim(saga, seq, step_hash=_hash(str(seq)), target="t", key=f"k{seq}")
        store.claim(other, 1, step_hash=H, target="t", key="k")
        store.record(saga, 4, ClaimStatus.FAILED, step_hash=_hash("4"), error="refused")
        claims = store.claims(saga)
        assert [c.step_seq for c in claims] == [2, 4, 7]
        assert [c.step_hash for c in claims] == [_hash("2"), _hash("4"), _hash("7")]
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
            store.claim(saga, seq, step_hash=H, target="t", key=f"k{seq}")
            if status is not ClaimStatus.CLAIMED:
                store.record(saga, seq, status, step_hash=H)
        assert store.prune(older_than_s=3600, apply=False) == 0
        assert store.prune(older_than_s=0, apply=False) == 2
        assert len(store.claims(saga)) == 4  # counting deletes nothing
        assert store.prune(older_than_s=0, apply=True) == 2
        assert {c.status for c in store.claims(saga)} == {
            ClaimStatus.CLAIMED,
            ClaimStatus.TIMED_OUT,
        }

    def test_prune_leaves_another_journals_claims(self, stores: Callable[..., ClaimStore]) -> None:
        mine, theirs = stores(), stores(journal=OTHER_JOURNAL)
        saga = _saga()
        for store in (mine, theirs):
            store.claim(saga, 1, step_hash=H, target="t", key="k")
            store.record(saga, 1, ClaimStatus.COMPENSATED, step_hash=H, result="done")
        self.put_unbound(mine, saga, 2, ClaimStatus.FAILED)
        self.put_unbound(mine, saga, 3, ClaimStatus.TIMED_OUT)
        assert mine.prune(older_than_s=0, apply=True) == 2  # its own and the settled unbound
        assert [(c.step_seq, c.unbound) for c in mine.claims(saga)] == [(3, True)]
        assert [c.status for c in theirs.claims(saga) if not c.unbound] == [ClaimStatus.COMPENSATED]
