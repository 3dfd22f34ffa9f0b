"""The composition root's start-up with the key service (``sagacity._env.starting_keys``): the
one sequence every service and ``Sagacity.from_env()`` use (docs/adr/0019-erasure.md §3)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import pytest

import sagacity._env
from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
from sagacity.privacy._keys import KeyService
from sagacity.testing import InMemoryKeyStore


class _CountedStore(InMemoryKeyStore):
    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def announced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Callable[[], list[str]]:
    """The journal's warnings so far, the once-per-process announcement reset."""
    monkeypatch.setattr(sagacity._env, "_announced", False)
    caplog.set_level(logging.WARNING, logger="sagacity.journal")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "sagacity.journal"]


def _configured(monkeypatch: pytest.MonkeyPatch) -> _CountedStore:
    store = _CountedStore()
    service = KeyService(store, KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    monkeypatch.setattr(sagacity._env, "key_service_from_env", lambda environ=None: service)
    return store


CLEAR = {"SAGACITY_ALLOW_CLEAR_DATA": "1"}


def _start_failing(why: str, given: list[KeyService | None]) -> None:
    """A start-up whose component fails after the key service was made (kept in ``given``)."""
    with sagacity._env.starting_keys(CLEAR) as keys:
        given.append(keys)
        raise RuntimeError(why)


def test_a_start_up_that_fails_closes_the_key_service_and_says_only_why(
    monkeypatch: pytest.MonkeyPatch, announced: Callable[[], list[str]]
) -> None:
    store = _configured(monkeypatch)
    given: list[KeyService | None] = []
    with pytest.raises(RuntimeError, match="broker unreachable"):  # the component's error
        _start_failing("broker unreachable", given)
    assert given[0] is not None
    assert store.closed == 1
    assert announced() == []


def test_a_started_component_keeps_its_key_service_open(
    monkeypatch: pytest.MonkeyPatch, announced: Callable[[], list[str]]
) -> None:
    store = _configured(monkeypatch)
    with sagacity._env.starting_keys({}) as keys:
        assert keys is not None
    assert store.closed == 0
    assert keys.seal("s-1", 1, "payload", b"x")  # still usable by its owner
    assert announced() == []


def test_without_a_key_the_clear_data_is_announced_once_the_component_started(
    announced: Callable[[], list[str]],
) -> None:
    given: list[KeyService | None] = []
    with pytest.raises(RuntimeError, match="start-up failed"):
        _start_failing("start-up failed", given)
    assert given == [None]
    assert announced() == []  # a failed start-up says only why it failed
    for _ in range(2):
        with sagacity._env.starting_keys(CLEAR) as keys:
            assert keys is None
    assert len(announced()) == 1  # once per process
    assert "not encrypted: SAGACITY_KEY_ENCRYPTION_KEY_FILE is not set" in announced()[0]


@pytest.mark.parametrize("value", ["", "0", "no", "off"])
def test_without_a_key_a_component_refuses_to_start_unless_told(
    value: str, announced: Callable[[], list[str]]
) -> None:
    """A saga journaled in clear can never be erased: no key is a refusal naming the key's
    setting, the command that makes one, and the setting that allows clear data."""
    started = []
    with (
        pytest.raises(sagacity._env.ConfigurationError) as refused,
        sagacity._env.starting_keys({"SAGACITY_ALLOW_CLEAR_DATA": value}),
    ):
        started.append(True)
    assert started == []
    message = str(refused.value)
    assert "SAGACITY_KEY_ENCRYPTION_KEY_FILE is not set" in message
    assert "sagacity keys init" in message
    assert "SAGACITY_ALLOW_CLEAR_DATA=1" in message
    assert "\n" not in message
    assert announced() == []


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_clear_data_allowed_explicitly_starts_and_says_so(
    value: str, announced: Callable[[], list[str]]
) -> None:
    with sagacity._env.starting_keys({"SAGACITY_ALLOW_CLEAR_DATA": value}) as keys:
        assert keys is None
    assert len(announced()) == 1


def test_a_value_of_the_allowing_setting_that_says_neither_is_refused() -> None:
    with pytest.raises(sagacity._env.ConfigurationError, match="SAGACITY_ALLOW_CLEAR_DATA='maybe'"):
        sagacity._env.clear_data_allowed({"SAGACITY_ALLOW_CLEAR_DATA": "maybe"})


def test_from_env_refuses_a_journal_in_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent (``Sagacity.from_env()``) starts through the same rule."""
    from sagacity import Sagacity

    monkeypatch.delenv("SAGACITY_KEY_ENCRYPTION_KEY_FILE", raising=False)
    monkeypatch.delenv("SAGACITY_ALLOW_CLEAR_DATA", raising=False)
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with pytest.raises(sagacity._env.ConfigurationError, match="no key-encryption key"):
        Sagacity.from_env()
