"""The key service: every reader and writer of sealed journal fields goes through it.

:class:`KeyService` seals and opens a saga's fields with the saga's data key (created on first
use, stored wrapped by the key-encryption key), destroys a saga's key for an erasure, and
rewraps every stored key under a new KEK for a rotation.  Where the wrapped keys live is the
:class:`~sagacity.ports.KeyStore` port: :class:`sagacity.postgres.PostgresKeyStore`, or
:class:`sagacity.testing.InMemoryKeyStore` for tests and single-process use.  See
docs/adr/0019-erasure.md.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from sagacity.errors import (
    ConfigurationError,
    DataKeyNotFoundError,
    DataKeyNotHeldError,
    SagaErasedError,
)
from sagacity.ports import KeyStore, StoredKey
from sagacity.privacy._envelope import KEK_SETTING, DataKey, KeyRing

KEY_CACHE_TTL_SETTING = "SAGACITY_KEY_CACHE_TTL_S"
"""How long a process keeps a saga's data key (and what it opened with it) before asking the
key store again: the bound within which an erasure reaches every process
(docs/operations/erasure.md)."""
MAX_KEY_CACHE_TTL_S = 60.0
"""The longest :data:`KEY_CACHE_TTL_SETTING` may be (and its default): the documented erasure
bound can be shortened, never lengthened."""


def key_cache_ttl(value: str | None) -> float:
    """The key cache's TTL from :data:`KEY_CACHE_TTL_SETTING` (``None`` or blank: the default,
    :data:`MAX_KEY_CACHE_TTL_S`).

    Raises:
        ConfigurationError: not a number of seconds from 0 (no key kept: the store is asked for
            every one) to the default.
    """
    if value is None or not value.strip():
        return MAX_KEY_CACHE_TTL_S
    try:
        ttl = float(value)
    except ValueError:
        ttl = float("nan")
    if not 0 <= ttl <= MAX_KEY_CACHE_TTL_S:
        raise ConfigurationError(
            f"{KEY_CACHE_TTL_SETTING} must be a number of seconds from 0 to "
            f"{MAX_KEY_CACHE_TTL_S:g} (the documented erasure bound), got {value!r}"
        )
    return ttl


@dataclass(frozen=True, kw_only=True)
class Destruction:
    """What :meth:`KeyService.destroy` found and did.

    Attributes:
        saga_id: the saga.
        destroyed: this call destroyed the key (``False``: it was destroyed already).
        had_key: a data key existed (``False``: nothing of the saga was ever sealed; the
            saga is marked erased all the same, so no key is created for it later).
        erased_at / erased_by / reason: the erasure on record (the first one's).
    """

    saga_id: str
    destroyed: bool
    had_key: bool
    erased_at: datetime
    erased_by: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Rotation:
    """What :meth:`KeyService.rotate` did.

    Attributes:
        new_kek_id: the KEK every key is now wrapped under.
        rewrapped: keys rewrapped by this call.
        by_kek: how many live keys each KEK wraps after the run.
    """

    new_kek_id: str
    rewrapped: int
    by_kek: dict[str, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every live key is wrapped under the new KEK: the others may be destroyed."""
        return all(kek_id == self.new_kek_id for kek_id in self.by_kek)


class KeyService:
    """Seals and opens journal fields with per-saga data keys.

    Args:
        store: where the wrapped keys live.
        keyring: the KEKs held (the first wraps new keys).
        cache_size: data keys kept unwrapped in memory (least recently used dropped).
        cache_ttl: seconds a cached key is used before the store is asked again; bounds how
            long another process keeps opening a saga after it was erased, and how long
            readers keep what they opened (:meth:`opened_until`).
    """

    def __init__(
        self,
        store: KeyStore,
        keyring: KeyRing,
        *,
        cache_size: int = 4096,
        cache_ttl: float = MAX_KEY_CACHE_TTL_S,
    ) -> None:
        if not cache_ttl >= 0:
            raise ConfigurationError(f"the key cache's TTL must not be negative: {cache_ttl!r}")
        self._store = store
        self._keyring = keyring
        self._cache_size = cache_size
        self._cache_ttl = cache_ttl
        self._cache: OrderedDict[str, tuple[DataKey, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._ready = False
        # Bumped by every forget: a key loaded before a destroy is not cached after it.
        self._epoch = 0
        self.unheld: tuple[str, ...] = ()
        """KEKs stored keys are wrapped under that this process does not hold, as the last
        :meth:`check` found them."""

    def _ensure_schema(self) -> None:
        if not self._ready:
            self._store.ensure_schema()
            self._ready = True

    @property
    def keyring(self) -> KeyRing:
        """The KEKs this service holds."""
        return self._keyring

    def close(self) -> None:
        """Release the store's connections."""
        self._store.close()

    def check(self) -> tuple[str, ...]:
        """The start-up check: create the store if missing and name the KEKs stored keys are
        wrapped under that this process does not hold.

        It verifies the process's own configuration only: its key files were read (by
        :meth:`KeyRing.from_setting`, which refuses a missing or malformed one) and its store
        answers.  A key of some saga wrapped under a KEK this process does not hold is data,
        not configuration: the KEK is named here (the caller warns; :attr:`unheld` keeps it
        for health reports) and that saga's messages fail one by one
        (:class:`~sagacity.errors.DataKeyNotHeldError`), so no stored row can stop a process
        from starting.  A KEK id names the KEK's bytes (docs/adr/0019-erasure.md §2): holding
        the id is holding the right key, so there is nothing to open to prove it.  The check
        reads the distinct KEK ids only (a skip scan), however many keys are stored.

        Returns:
            the ids of the KEKs not held that wrap stored keys (empty: none).

        Raises:
            PersistenceError: the store could not be reached.
        """
        self._ensure_schema()
        self.unheld = tuple(sorted(self._store.kek_ids() - set(self._keyring.key_ids)))
        return self.unheld

    # --- sealing ---------------------------------------------------------------------------
    def seal(self, saga_id: str, seq: int, field_name: str, plaintext: bytes) -> bytes:
        """``plaintext`` sealed for (``saga_id``, ``seq``, ``field_name``); the saga's data key
        is created on its first use.

        Raises:
            SagaErasedError: the saga was erased; nothing more of it is sealed.
            DataKeyNotHeldError: the saga's key is wrapped under a KEK not held.
            PersistenceError: the store could not be reached.
        """
        return self._key(saga_id, create=True).seal(seq, field_name, plaintext)

    def prepare(self, saga_id: str) -> None:
        """Make the saga's data key now (or load it), so that its first sealed field costs no
        round trip to the store: the journal calls it as it opens a sealed saga.

        Raises:
            SagaErasedError: the saga was erased.
            DataKeyNotHeldError: the saga's key is wrapped under a KEK not held.
            PersistenceError: the store could not be reached.
        """
        self._key(saga_id, create=True)

    def material(self, saga_id: str) -> bytes:
        """The saga's raw data key (created on first use), for the compiled sealer of this
        process (``schemas._hotpath.link_encoded_sealed``): it seals as :meth:`seal` does.

        Raises:
            as :meth:`seal`.
        """
        # A cached key's hit, without the lock: the sealed journal asks once per event.  Each
        # step is one call into the dict (atomic under the interpreter lock); a key forgotten
        # or evicted meanwhile was still valid when read, as it is with the lock.
        hit = self._cache.get(saga_id)
        if hit is not None and hit[1] > time.monotonic():
            try:  # noqa: SIM105 (not contextlib.suppress: once per event)
                self._cache.move_to_end(saga_id)
            except KeyError:
                pass
            return hit[0].material
        return self._key(saga_id, create=True).material

    def open(self, saga_id: str, seq: int, field_name: str, sealed: bytes) -> bytes:
        """The plaintext of a field sealed for (``saga_id``, ``seq``, ``field_name``).

        Raises:
            CiphertextAuthenticationError: "authentication failed" (altered, or misplaced).
            SagaErasedError: the saga was erased.
            DataKeyNotFoundError: nothing of the saga was ever sealed.
            DataKeyNotHeldError: the saga's key is wrapped under a KEK not held.
            PersistenceError: the store could not be reached.
        """
        return self._key(saga_id, create=False).open(seq, field_name, sealed)

    def _key(self, saga_id: str, *, create: bool) -> DataKey:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(saga_id)
            if hit is not None and hit[1] > now:
                self._cache.move_to_end(saga_id)
                return hit[0]
            epoch = self._epoch
        self._ensure_schema()
        row = self._store.load(saga_id)
        if row is None:
            if not create:
                raise DataKeyNotFoundError(
                    f"saga {saga_id!r} has no data key: nothing of it was sealed",
                    saga_id=saga_id,
                )
            key, raw = DataKey.generate(saga_id)
            wrapped = self._keyring.primary.wrap(saga_id, raw)
            row = self._store.create(saga_id, kek_id=self._keyring.primary.key_id, wrapped=wrapped)
            if row.wrapped != wrapped:  # another process created it first: use theirs
                key = self._unwrap(row)
        else:
            key = self._unwrap(row)
        with self._lock:
            if epoch == self._epoch:
                self._cache[saga_id] = (key, now + self._cache_ttl)
                self._cache.move_to_end(saga_id)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return key

    def _unwrap(self, row: StoredKey) -> DataKey:
        if row.erased or row.kek_id is None or row.wrapped is None:
            raise _erased(row)
        kek = self._keyring.get(row.kek_id)
        if kek is None:
            raise DataKeyNotHeldError(
                f"the data key of saga {row.saga_id!r} is wrapped under key-encryption key "
                f"{row.kek_id}, which this process does not hold (it holds "
                f"{', '.join(self._keyring.key_ids)})",
                saga_id=row.saga_id,
                kek_id=row.kek_id,
                setting=KEK_SETTING,
            )
        return DataKey.of(row.saga_id, kek.unwrap(row.saga_id, row.wrapped))

    def forget(self, saga_id: str) -> None:
        """Drop the saga's key from this process's cache: its next seal or open asks the store
        (which refuses an erased saga's)."""
        with self._lock:
            self._epoch += 1
            self._cache.pop(saga_id, None)

    @property
    def cache_ttl(self) -> float:
        """Seconds a cached key is used before the store is asked again."""
        return self._cache_ttl

    def opened_until(self, saga_id: str) -> float:
        """Until when (``time.monotonic()``) what was opened with the saga's key so far may be
        kept in memory: the end of the cached key's life, which began when the store last
        showed the key was not destroyed; now when no key of the saga is cached (a reader
        then opens it again before showing it).

        A cache of opened entries holds each one no longer than this
        (docs/operations/erasure.md): after an erasure, within :attr:`cache_ttl` at most.
        """
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(saga_id)
            return min(hit[1], now + self._cache_ttl) if hit is not None else now

    # --- erasure and rotation --------------------------------------------------------------
    def destroy(self, saga_id: str, *, actor: str, reason: str) -> Destruction:
        """Destroy the saga's data key: every field sealed under it becomes unreadable.

        Idempotent: a second call (or a concurrent one) destroys nothing and reports the first
        erasure.  Other processes stop opening the saga when their cached key expires
        (``cache_ttl``).

        Raises:
            PersistenceError: the store could not be reached.
        """
        self.forget(saga_id)
        self._ensure_schema()
        row, destroyed, had_key = self._store.destroy(saga_id, actor=actor, reason=reason)
        self.forget(saga_id)
        assert row.erased_at is not None
        return Destruction(
            saga_id=saga_id,
            destroyed=destroyed,
            had_key=had_key,
            erased_at=row.erased_at,
            erased_by=row.erased_by or "",
            reason=row.reason or "",
        )

    def rotate(self, *, batch: int = 500) -> Rotation:
        """Rewrap every live data key under the primary KEK, unwrapping with the others.

        Safe while readers and writers run (each key is replaced only if unchanged since it
        was read), and safe to run again; keys under a KEK this process does not hold are
        left and counted in the result.

        Raises:
            CiphertextAuthenticationError: a stored key does not open under its KEK.
            PersistenceError: the store could not be reached.
        """
        self._ensure_schema()
        primary = self._keyring.primary
        olds = tuple(k for k in self._keyring.key_ids if k != primary.key_id)
        rewrapped = 0
        after = ""
        while olds:
            rows = self._store.pending_rewrap(kek_ids=olds, after=after, limit=batch)
            if not rows:
                break
            for row in rows:
                after = row.saga_id
                if row.kek_id is None or row.wrapped is None:
                    continue
                old = self._keyring.get(row.kek_id)
                assert old is not None
                raw = old.unwrap(row.saga_id, row.wrapped)
                if self._store.rewrap(
                    row.saga_id,
                    old_kek_id=row.kek_id,
                    old_wrapped=row.wrapped,
                    kek_id=primary.key_id,
                    wrapped=primary.wrap(row.saga_id, raw),
                ):
                    rewrapped += 1
        return Rotation(
            new_kek_id=primary.key_id, rewrapped=rewrapped, by_kek=self._store.count_by_kek()
        )


def _erased(row: StoredKey) -> SagaErasedError:
    when = row.erased_at.isoformat() if row.erased_at else None
    return SagaErasedError(
        f"saga {row.saga_id!r} was erased{f' at {when}' if when else ''}: its data key was "
        "destroyed and its sealed fields cannot be opened",
        saga_id=row.saga_id,
        erased_at=when,
    )
