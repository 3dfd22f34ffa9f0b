"""The contract every :class:`~sagacity.ports.KeyStore` meets; subclass it per adapter.

A subclass provides :meth:`KeyStoreContract.create_store`: a store on the test's database
(one fresh database per test, shared by every store the test makes), its schema not yet
ensured.  Stores it creates are closed after the test.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sagacity.errors import SagaErasedError
from sagacity.ports import KeyStore
from sagacity.privacy._envelope import KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService

WRAPPED_A = b"SGW1" + bytes(60)
WRAPPED_B = b"SGW1" + bytes([1]) * 60


class KeyStoreContract(abc.ABC):
    """One row per saga, the first creator wins, an erasure keeps a marker and happens once,
    a rewrap replaces only an unchanged key; the key service behaves alike on every store."""

    @abc.abstractmethod
    def create_store(self) -> KeyStore:
        """A store on the test's database, its schema not yet ensured."""

    @pytest.fixture
    def stores(self) -> Iterator[Callable[[], KeyStore]]:
        """``stores()``: stores from :meth:`create_store` with their schema, closed after the
        test."""
        made: list[KeyStore] = []

        def make() -> KeyStore:
            store = self.create_store()
            made.append(store)
            store.ensure_schema()
            return store

        try:
            yield make
        finally:
            for store in made:
                store.close()

    @pytest.fixture
    def store(self, stores: Callable[[], KeyStore]) -> KeyStore:
        """A store with its schema, closed after the test."""
        return stores()

    def test_it_implements_the_protocol(self, store: KeyStore) -> None:
        assert isinstance(store, KeyStore)
        store.ensure_schema()  # repeatable
        assert store.load("s-1") is None
        assert store.kek_ids() == set()
        assert store.count_by_kek() == {}

    def test_it_exists_once_its_schema_is_ensured(self) -> None:
        store = self.create_store()
        try:
            assert store.exists() is False  # looking creates nothing
            assert store.exists() is False
            store.ensure_schema()
            assert store.exists() is True
        finally:
            store.close()

    def test_the_first_creator_wins(self, store: KeyStore) -> None:
        first = store.create("s-1", kek_id="k1", wrapped=WRAPPED_A)
        second = store.create("s-1", kek_id="k2", wrapped=WRAPPED_B)
        assert (first.kek_id, first.wrapped, first.erased) == ("k1", WRAPPED_A, False)
        assert (second.kek_id, second.wrapped) == ("k1", WRAPPED_A)
        assert store.load("s-1") == first

    def test_stores_on_one_database_see_each_other(self, stores: Callable[[], KeyStore]) -> None:
        one, other = stores(), stores()
        made = one.create("s-1", kek_id="k1", wrapped=WRAPPED_A)
        assert other.load("s-1") == made
        assert other.create("s-1", kek_id="k2", wrapped=WRAPPED_B) == made

    def test_an_erasure_happens_once_and_keeps_a_marker(self, store: KeyStore) -> None:
        store.create("s-1", kek_id="k1", wrapped=WRAPPED_A)
        row, destroyed, had_key = store.destroy("s-1", actor="dpo", reason="art. 17")
        assert (destroyed, had_key, row.kek_id, row.wrapped) == (True, True, None, None)
        assert (row.erased, row.erased_by, row.reason) == (True, "dpo", "art. 17")
        again, destroyed, had_key = store.destroy("s-1", actor="other", reason="again")
        assert (destroyed, had_key) == (False, True)
        assert again == row
        assert store.load("s-1") == row
        assert store.create("s-1", kek_id="k1", wrapped=WRAPPED_B) == row  # no key after erasure

    def test_erasing_a_saga_without_a_key_leaves_a_marker(self, store: KeyStore) -> None:
        row, destroyed, had_key = store.destroy("s-0", actor="dpo", reason="never sealed")
        assert (destroyed, had_key, row.erased) == (True, False, True)
        assert store.create("s-0", kek_id="k1", wrapped=WRAPPED_A).erased

    def test_concurrent_erasures_erase_once(self, store: KeyStore) -> None:
        store.create("s-1", kek_id="k1", wrapped=WRAPPED_A)
        barrier = threading.Barrier(4)
        results: list[bool] = []

        def erase(n: int) -> None:
            barrier.wait()
            results.append(store.destroy("s-1", actor=f"op-{n}", reason="r")[1])

        threads = [threading.Thread(target=erase, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(results) == [False, False, False, True]

    def test_a_rewrap_replaces_only_an_unchanged_key(self, store: KeyStore) -> None:
        for saga in ("s-3", "s-1", "s-2", "s-4"):
            store.create(saga, kek_id="old", wrapped=WRAPPED_A)
        store.create("s-5", kek_id="other", wrapped=WRAPPED_A)
        store.destroy("s-4", actor="dpo", reason="r")
        page = store.pending_rewrap(kek_ids=("old",), after="", limit=2)
        assert [r.saga_id for r in page] == ["s-1", "s-2"]
        rest = store.pending_rewrap(kek_ids=("old",), after="s-2", limit=10)
        assert [r.saga_id for r in rest] == ["s-3"]

        def swap(saga_id: str, old_wrapped: bytes) -> bool:
            return store.rewrap(
                saga_id, old_kek_id="old", old_wrapped=old_wrapped, kek_id="new", wrapped=WRAPPED_B
            )

        assert swap("s-1", WRAPPED_A)
        assert not swap("s-1", WRAPPED_A)  # already rewrapped
        assert not swap("s-2", WRAPPED_B)  # not what is stored
        assert not swap("s-4", WRAPPED_A)  # erased
        loaded = store.load("s-1")
        assert loaded is not None
        assert (loaded.kek_id, loaded.wrapped) == ("new", WRAPPED_B)
        assert store.count_by_kek() == {"old": 2, "new": 1, "other": 1}
        assert store.kek_ids() == {"old", "new", "other"}

    def test_the_key_service_behaves_alike_on_every_store(
        self, store: KeyStore, tmp_path: Path
    ) -> None:
        old = write_key_encryption_key(tmp_path / "old.kek")
        new = write_key_encryption_key(tmp_path / "new.kek")
        service = KeyService(store, KeyRing((old,)))
        service.check()
        sealed = service.seal("s-1", 2, "payload", b"marker")
        service.seal("s-2", 2, "payload", b"other")
        rotated = KeyService(store, KeyRing((new, old))).rotate()
        assert (rotated.rewrapped, rotated.complete) == (2, True)
        reader = KeyService(store, KeyRing((new,)))
        assert reader.open("s-1", 2, "payload", sealed) == b"marker"
        reader.destroy("s-1", actor="dpo", reason="r")
        with pytest.raises(SagaErasedError):
            reader.open("s-1", 2, "payload", sealed)
