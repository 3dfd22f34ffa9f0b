"""The reads a journal keeps hold opened data no longer than the key service allows, and drop
a saga at once when it is forgotten (docs/operations/erasure.md: erasure reaches every reader
within the key cache's TTL)."""

from __future__ import annotations

import os
import time

import pytest

from sagacity import EntryDraft, EventType
from sagacity.chain import committing, link
from sagacity.errors import ConfigurationError
from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
from sagacity.privacy._keys import (
    KEY_CACHE_TTL_SETTING,
    MAX_KEY_CACHE_TTL_S,
    KeyService,
    key_cache_ttl,
)
from sagacity.producer import SagaRead
from sagacity.producer._reader import ReadCache
from sagacity.testing import InMemoryKeyStore

GENESIS = "0" * 64


def _read(saga_id: str, *, opened: bool, next_offset: int = 1) -> SagaRead:
    draft = EntryDraft(saga_id=saga_id, event_type=EventType.INTENT, tool="t", payload='{"a":1}')
    entry = link(committing(draft) if opened else draft, seq=1, prev_hash=GENESIS)
    return SagaRead(
        saga_id=saga_id, partition=0, entries=[entry], offsets=[0], next_offset=next_offset
    )


class _Keys:
    """A key service whose keys live until ``until[saga]`` (monotonic seconds)."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}

    def opened_until(self, saga_id: str) -> float:
        return self.until.get(saga_id, time.monotonic())


def test_a_read_holding_openings_is_kept_only_while_its_key_is() -> None:
    keys = _Keys()
    cache = ReadCache(keys=keys)
    keys.until["s"] = time.monotonic() + 60
    cache.put(_read("s", opened=True))
    assert cache.get("s") is not None
    keys.until["s"] = time.monotonic() - 1  # the key's cache life ran out: a read opens again
    cache.put(_read("s", opened=True, next_offset=2))
    assert cache.get("s") is None


def test_a_read_with_nothing_opened_is_kept_until_evicted() -> None:
    cache = ReadCache(keys=_Keys())  # no key cached at all
    cache.put(_read("plain", opened=False))
    assert cache.get("plain") is not None
    cache.put(_read("opened", opened=True))  # its key is not cached: kept no time
    assert cache.get("opened") is None


def test_without_a_key_service_reads_are_kept_and_a_forgotten_saga_goes_at_once() -> None:
    cache = ReadCache()
    cache.put(_read("s", opened=True))
    assert cache.get("s") is not None
    cache.forget("s")
    assert cache.get("s") is None
    cache.forget("never-read")  # nothing to forget: no error


def _service(ttl: float) -> KeyService:
    return KeyService(
        InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)), cache_ttl=ttl
    )


def test_the_key_service_says_how_long_what_it_opened_may_be_kept() -> None:
    keys = _service(30.0)
    assert keys.opened_until("s") <= time.monotonic()  # nothing cached: not at all
    before = time.monotonic()
    keys.prepare("s")
    until = keys.opened_until("s")
    assert before + 30.0 - 1 <= until <= time.monotonic() + 30.0
    keys.forget("s")  # the saga's ERASED seen: nothing opened of it may be kept
    assert keys.opened_until("s") <= time.monotonic()
    keys.prepare("s")
    keys.destroy("s", actor="dpo", reason="art. 17")
    assert keys.opened_until("s") <= time.monotonic()


def test_the_key_cache_ttl_is_a_setting_bounded_by_the_documented_bound() -> None:
    assert key_cache_ttl(None) == key_cache_ttl("  ") == MAX_KEY_CACHE_TTL_S == 60.0
    assert key_cache_ttl("2.5") == 2.5
    assert key_cache_ttl("0") == 0.0  # no key kept: the store is asked for every one
    for bad in ("-1", "61", "nan", "soon"):
        with pytest.raises(ConfigurationError, match=KEY_CACHE_TTL_SETTING):
            key_cache_ttl(bad)
    with pytest.raises(ConfigurationError):
        _service(-1.0)
    uncached = _service(0.0)
    uncached.prepare("s")
    assert uncached.opened_until("s") <= time.monotonic()  # nothing opened is kept


def test_the_entries_bound_still_holds_with_the_opened_data_bound() -> None:
    """Kept reads are bounded in entries too: a read longer than the bound is not kept."""
    cache = ReadCache(size=10, entries=1, keys=_Keys())
    cache.put(_read("plain", opened=False))
    assert cache.get("plain") is not None
    long = _read("long", opened=False)
    long.entries.append(long.entries[0])
    cache.put(long)
    assert cache.get("long") is None
    assert cache.get("plain") is not None
