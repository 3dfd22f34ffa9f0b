"""The key service on the real PostgreSQL: first use, erasure, wrong keys and rotation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from sagacity._env import key_service_from_env
from sagacity.errors import (
    CiphertextAuthenticationError,
    DataKeyNotFoundError,
    DataKeyNotHeldError,
    KeyEncryptionKeyError,
    PersistenceUnavailableError,
    SagaErasedError,
)
from sagacity.postgres import PostgresKeyStore, applied_versions
from sagacity.postgres._keys import TABLE
from sagacity.privacy._envelope import (
    KEK_SETTING,
    KeyEncryptionKey,
    KeyRing,
    write_key_encryption_key,
)
from sagacity.privacy._keys import KeyService

pytestmark = [pytest.mark.postgres]

MARKER = b'{"email":"marker-7f3a@example.org"}'
T = TypeVar("T")
DATABASE = "SAGACITY_DATABASE_URL"


@pytest.fixture
def kek(tmp_path: Path) -> KeyEncryptionKey:
    return write_key_encryption_key(tmp_path / "current.kek")


@pytest.fixture
def services(pg_dsn: str) -> Iterator[Callable[..., KeyService]]:
    """Key services on the test's schema, each with its own connections and cache (as
    separate processes would have), closed after the test."""
    made: list[KeyService] = []

    def make(*keks: KeyEncryptionKey, cache_ttl: float = 60.0) -> KeyService:
        service = KeyService(PostgresKeyStore(pg_dsn), KeyRing(keks), cache_ttl=cache_ttl)
        made.append(service)
        service.check()
        return service

    yield make
    for service in made:
        service.close()


def _at_once(count: int, work: Callable[[int], T]) -> list[T]:
    """``work(i)`` on ``count`` threads released together; their results, or the first error."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:  # collected, raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def _rows(pg_dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute(
            f"SELECT saga_id, kek_id, wrapped, erased_at FROM {TABLE} ORDER BY saga_id"
        ).fetchall()


def test_a_field_sealed_by_one_process_opens_in_another(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    writer, reader = services(kek), services(kek)
    payload = writer.seal("s-1", 2, "payload", MARKER)
    result = writer.seal("s-1", 3, "result", b'{"ok":true}')
    assert b"marker-7f3a" not in payload
    assert reader.open("s-1", 2, "payload", payload) == MARKER
    assert reader.open("s-1", 3, "result", result) == b'{"ok":true}'
    [(saga_id, kek_id, wrapped, erased_at)] = _rows(pg_dsn)
    assert (saga_id, kek_id, erased_at) == ("s-1", kek.key_id, None)
    assert len(wrapped) == 64


def test_an_altered_ciphertext_or_stored_key_fails_authentication(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    writer = services(kek)
    sealed = bytearray(writer.seal("s-1", 2, "payload", MARKER))
    sealed[len(sealed) // 2] ^= 0x01
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        services(kek).open("s-1", 2, "payload", bytes(sealed))
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            f"UPDATE {TABLE} SET wrapped = set_byte(wrapped, 29, get_byte(wrapped, 29) # 1) "
            "WHERE saga_id = 's-1'"
        )
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed") as caught:
        services(kek).open("s-1", 2, "payload", writer.seal("s-1", 2, "payload", MARKER))
    assert caught.value.saga_id == "s-1"


def test_keys_under_a_kek_not_held_are_data_named_at_start_and_refused_per_saga(
    services: Callable[..., KeyService],
    kek: KeyEncryptionKey,
    tmp_path: Path,
    pg_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A key of some saga under a KEK this process does not hold is that saga's problem: the
    # process starts (naming the KEK), opens and seals every other saga, and refuses only that
    # saga's fields, with an error that names the setting and the KEK.
    sealed = services(kek).seal("s-1", 2, "payload", MARKER)
    wrong = write_key_encryption_key(tmp_path / "wrong.kek")
    other = services(wrong)
    assert other.unheld == (kek.key_id,)
    with pytest.raises(DataKeyNotHeldError, match=f"{KEK_SETTING}: .*{kek.key_id}") as caught:
        other.open("s-1", 2, "payload", sealed)
    assert (caught.value.saga_id, caught.value.kek_id) == ("s-1", kek.key_id)
    assert caught.value.reason == "key-encryption key not held"
    with pytest.raises(DataKeyNotHeldError):
        other.seal("s-1", 3, "payload", MARKER)
    mine = other.seal("s-2", 1, "payload", MARKER)
    assert other.open("s-2", 1, "payload", mine) == MARKER
    # From the environment too: a warning naming the setting, never a refusal to start.
    with caplog.at_level("WARNING", logger="sagacity.keys"):
        started = key_service_from_env({KEK_SETTING: str(tmp_path / "wrong.kek"), DATABASE: pg_dsn})
    assert started is not None
    started.close()
    [warning] = [r.getMessage() for r in caplog.records if r.name == "sagacity.keys"]
    assert KEK_SETTING in warning
    assert kek.key_id in warning


def test_the_kek_setting_from_the_environment(
    pg_dsn: str, kek: KeyEncryptionKey, tmp_path: Path
) -> None:
    assert key_service_from_env({DATABASE: pg_dsn}) is None  # no key: no encryption
    assert key_service_from_env({KEK_SETTING: " ", DATABASE: pg_dsn}) is None  # blank: unset
    for value, problem in [
        (str(tmp_path / "absent.kek"), "does not exist"),
    ]:
        with pytest.raises(KeyEncryptionKeyError, match=f"{KEK_SETTING}: .*{problem}"):
            key_service_from_env({KEK_SETTING: value, DATABASE: pg_dsn})
    service = key_service_from_env({KEK_SETTING: str(tmp_path / "current.kek"), DATABASE: pg_dsn})
    assert service is not None
    try:
        assert service.keyring.key_ids == (kek.key_id,)
        sealed = service.seal("s-1", 1, "payload", MARKER)
        assert service.open("s-1", 1, "payload", sealed) == MARKER
    finally:
        service.close()


def test_an_unknown_saga_has_no_key_and_opening_does_not_create_one(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    with pytest.raises(DataKeyNotFoundError, match="'nobody' has no data key"):
        services(kek).open("nobody", 1, "payload", b"SGE1" + bytes(40))
    assert _rows(pg_dsn) == []


def test_after_destroy_the_saga_neither_opens_nor_seals(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    writer = services(kek)
    other = services(kek, cache_ttl=0)
    sealed = writer.seal("s-1", 2, "payload", MARKER)
    assert other.open("s-1", 2, "payload", sealed) == MARKER
    done = writer.destroy("s-1", actor="dpo@example.org", reason="art. 17 request")
    assert (done.destroyed, done.had_key, done.erased_by) == (True, True, "dpo@example.org")
    for service in (writer, other, services(kek)):
        with pytest.raises(SagaErasedError, match="saga 's-1' was erased at") as caught:
            service.open("s-1", 2, "payload", sealed)
        assert caught.value.saga_id == "s-1"
        with pytest.raises(SagaErasedError):
            service.seal("s-1", 9, "payload", MARKER)
    [(_, kek_id, wrapped, erased_at)] = _rows(pg_dsn)
    assert (kek_id, wrapped, erased_at) == (None, None, done.erased_at)
    again = writer.destroy("s-1", actor="someone-else", reason="again")
    assert (again.destroyed, again.erased_at, again.erased_by) == (
        False,
        done.erased_at,
        "dpo@example.org",
    )


def test_a_saga_erased_before_any_key_gets_none_later(
    services: Callable[..., KeyService], kek: KeyEncryptionKey
) -> None:
    service = services(kek)
    done = service.destroy("s-0", actor="dpo", reason="never sealed")
    assert (done.destroyed, done.had_key) == (True, False)
    with pytest.raises(SagaErasedError):
        service.seal("s-0", 1, "payload", MARKER)


@pytest.mark.parametrize("had_key", [True, False])
def test_concurrent_destroys_destroy_once(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, had_key: bool
) -> None:
    if had_key:
        services(kek).seal("s-1", 2, "payload", MARKER)
    many = [services(kek) for _ in range(6)]
    done = _at_once(6, lambda i: many[i].destroy("s-1", actor=f"op-{i}", reason="erase"))
    assert sum(d.destroyed for d in done) == 1
    assert len({(d.erased_at, d.erased_by) for d in done}) == 1
    assert all(d.had_key == had_key for d in done if d.destroyed)


def test_concurrent_first_use_of_a_saga_makes_one_key(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    many = [services(kek) for _ in range(6)]
    sealed = _at_once(6, lambda i: many[i].seal("s-1", i, "payload", MARKER))
    assert len(_rows(pg_dsn)) == 1
    for reader in many:
        for i, blob in enumerate(sealed):
            assert reader.open("s-1", i, "payload", blob) == MARKER


@pytest.mark.parametrize("round_", range(3))
def test_instances_starting_at_once_all_create_the_table(pg_dsn: str, round_: int) -> None:
    stores = [PostgresKeyStore(pg_dsn) for _ in range(6)]
    for store in stores:  # connect first, so the barrier releases the DDL itself together
        store.connect()
    try:
        _at_once(6, lambda i: stores[i].ensure_schema())
    finally:
        for store in stores:
            store.close()
    assert _rows(pg_dsn) == []


def test_rotation_keeps_every_saga_readable_and_retires_the_old_kek(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, tmp_path: Path, pg_dsn: str
) -> None:
    new = write_key_encryption_key(tmp_path / "new.kek")
    writer = services(kek)
    sagas = [f"s-{n:03}" for n in range(40)]
    sealed = {s: writer.seal(s, 2, "payload", MARKER + s.encode()) for s in sagas}
    writer.destroy("s-007", actor="dpo", reason="erased before the rotation")
    # Readers hold both keys during the rotation and read the store on every open.
    readers = [services(kek, new, cache_ttl=0), services(new, kek, cache_ttl=0)]
    stop = threading.Event()
    failures: list[BaseException] = []
    reads = [0]

    def read() -> None:
        while not stop.is_set():
            for saga in sagas:
                if saga == "s-007":
                    continue
                for reader in readers:
                    try:
                        assert (
                            reader.open(saga, 2, "payload", sealed[saga]) == MARKER + saga.encode()
                        )
                        reads[0] += 1
                    except BaseException as exc:  # collected, asserted below
                        failures.append(exc)
                        return

    reader_thread = threading.Thread(target=read)
    reader_thread.start()
    try:
        done = services(new, kek).rotate(batch=7)
    finally:
        stop.set()
        reader_thread.join(60)
    assert failures == []
    assert reads[0] > 0
    assert done.rewrapped == 39
    assert done.complete
    assert done.by_kek == {new.key_id: 39}
    assert services(new, kek).rotate().rewrapped == 0  # running it again changes nothing

    only_new = services(new)
    for saga in sagas:
        if saga == "s-007":
            with pytest.raises(SagaErasedError):
                only_new.open(saga, 2, "payload", sealed[saga])
        else:
            assert only_new.open(saga, 2, "payload", sealed[saga]) == MARKER + saga.encode()
    assert services(kek).unheld == (new.key_id,)  # started: the keys are data, not its own
    for saga_id, _, wrapped, _ in _rows(pg_dsn):
        if wrapped is not None:
            with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
                kek.unwrap(saga_id, bytes(wrapped))


def test_rotation_leaves_keys_under_a_kek_it_was_not_given(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, tmp_path: Path, pg_dsn: str
) -> None:
    stray = write_key_encryption_key(tmp_path / "stray.kek")
    services(kek).seal("s-1", 1, "payload", MARKER)
    services(stray, kek).seal("s-2", 1, "payload", MARKER)
    new = write_key_encryption_key(tmp_path / "new.kek")
    rotator = KeyService(PostgresKeyStore(pg_dsn), KeyRing((new, kek)))
    try:
        done = rotator.rotate()
    finally:
        rotator.close()
    assert done.rewrapped == 1
    assert done.by_kek == {new.key_id: 1, stray.key_id: 1}
    assert not done.complete


def test_a_key_loaded_while_the_saga_is_destroyed_is_not_cached_after_it(
    kek: KeyEncryptionKey, pg_dsn: str
) -> None:
    class Racing(PostgresKeyStore):
        """Reads the row, then lets the saga be destroyed before the reader caches it."""

        race: Callable[[], object] | None = None

        def load(self, saga_id: str) -> Any:
            row = super().load(saga_id)
            race, self.race = self.race, None
            if race is not None:
                race()
            return row

    store = Racing(pg_dsn)
    service = KeyService(store, KeyRing((kek,)))
    try:
        sealed = service.seal("s-1", 2, "payload", MARKER)
        service.forget("s-1")
        store.race = lambda: service.destroy("s-1", actor="dpo", reason="erase")
        assert service.open("s-1", 2, "payload", sealed) == MARKER  # read before the destroy
        with pytest.raises(SagaErasedError):
            service.open("s-1", 2, "payload", sealed)
    finally:
        service.close()


def test_the_kek_ids_in_use_are_listed_without_counting(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, tmp_path: Path, pg_dsn: str
) -> None:
    other = write_key_encryption_key(tmp_path / "other.kek")
    for n in range(5):
        services(kek, other).seal(f"a-{n}", 1, "payload", MARKER)
    services(other, kek).seal("b-1", 1, "payload", MARKER)
    services(kek, other).destroy("a-0", actor="dpo", reason="erase")
    store = PostgresKeyStore(pg_dsn)
    try:
        assert store.kek_ids() == {kek.key_id, other.key_id}
        assert store.count_by_kek() == {kek.key_id: 4, other.key_id: 1}
    finally:
        store.close()


def test_an_unreachable_database_is_reported_as_unavailable(kek: KeyEncryptionKey) -> None:
    service = KeyService(
        PostgresKeyStore("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"),
        KeyRing((kek,)),
    )
    try:
        with pytest.raises(PersistenceUnavailableError, match="key store: connect: database un"):
            service.seal("s-1", 1, "payload", MARKER)
    finally:
        service.close()


_PROCESS = """
import os, sys, time
from sagacity._env import key_service_from_env
service = key_service_from_env({**os.environ, "SAGACITY_DATABASE_URL": sys.argv[1]})
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
print(service.seal("s-1", int(sys.argv[3]), "payload", b"from a process").hex())
service.close()
"""


def test_two_processes_using_a_saga_first_at_once_make_one_key(
    services: Callable[..., KeyService], kek: KeyEncryptionKey, tmp_path: Path, pg_dsn: str
) -> None:
    import os
    import subprocess
    import sys
    import time

    services(kek)  # the table exists, as after any instance's start
    env = {**os.environ, KEK_SETTING: str(tmp_path / "current.kek")}
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, pg_dsn, str(start), str(seq)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seq in (1, 2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert len(_rows(pg_dsn)) == 1
    reader = services(kek)
    for seq, (out, _) in zip((1, 2), outputs, strict=True):
        assert reader.open("s-1", seq, "payload", bytes.fromhex(out.strip())) == b"from a process"


_PREVIOUS_RELEASE_TABLE = f"""
CREATE TABLE {TABLE} (
    saga_id text PRIMARY KEY, kek_id text, wrapped bytea,
    created_at timestamptz NOT NULL DEFAULT now(), rewrapped_at timestamptz,
    erased_at timestamptz, erased_by text, reason text,
    CHECK ((erased_at IS NULL) = (wrapped IS NOT NULL AND kek_id IS NOT NULL))
)
"""


def test_the_key_store_is_migrated_by_the_one_runner_and_keeps_an_older_table(
    pg_dsn: str, kek: KeyEncryptionKey
) -> None:
    """The store's table is made by the migrations runner (its version recorded, like every
    other table's), and a table an earlier release made with its own DDL is adopted as it is,
    its keys still opening."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(_PREVIOUS_RELEASE_TABLE)
    wrapped = kek.wrap("s-old", bytes(range(32)))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (saga_id, kek_id, wrapped) VALUES (%s, %s, %s)",
            ("s-old", kek.key_id, wrapped),
        )
    store = PostgresKeyStore(pg_dsn)
    try:
        store.ensure_schema()
        store.ensure_schema()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert applied_versions(conn, "sagacity_keys") == {1}
        found = store.load("s-old")
        assert found is not None
        assert found.wrapped == wrapped
        service = KeyService(store, KeyRing((kek,)))
        sealed = service.seal("s-old", 1, "payload", MARKER)
        assert service.open("s-old", 1, "payload", sealed) == MARKER
    finally:
        store.close()
