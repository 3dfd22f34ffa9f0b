"""Settings through pydantic-settings: the service's own variable, then the shared one, then
the default; keywords win; a bad value names its variable."""

from __future__ import annotations

from typing import ClassVar

import pytest

from sagacity.config._settings import SagacitySettings
from sagacity.errors import ConfigurationError


class _Shop(SagacitySettings):
    env_service: ClassVar[str] = "SHOP"
    env_names: ClassVar[dict[str, tuple[str, ...]]] = {"port": ("HTTP_PORT",)}
    env_excluded: ClassVar[frozenset[str]] = frozenset({"unsafe"})

    topic: str = "sagacity.journal"
    port: int = 8000
    tools: tuple[str, ...] = ()
    unsafe: bool = False


def test_own_variable_then_shared_then_default_and_keywords_win() -> None:
    assert _Shop.from_env({}).topic == "sagacity.journal"
    assert _Shop.from_env({"SAGACITY_TOPIC": "shared"}).topic == "shared"
    both = {"SAGACITY_TOPIC": "shared", "SAGACITY_SHOP_TOPIC": "own"}
    assert _Shop.from_env(both).topic == "own"
    assert _Shop.from_env(both, topic="kw").topic == "kw"
    assert _Shop.from_env(both, topic=None).topic == "own"  # None: not given
    assert _Shop.from_env({"SAGACITY_SHOP_TOPIC": ""}).topic == "sagacity.journal"


def test_older_names_sequences_and_option_only_fields() -> None:
    assert _Shop.from_env({"SAGACITY_SHOP_HTTP_PORT": "9464"}).port == 9464
    assert _Shop.from_env({"SAGACITY_SHOP_TOOLS": "a:b  c:d"}).tools == ("a:b", "c:d")
    assert _Shop.from_env({"SAGACITY_SHOP_UNSAFE": "1"}).unsafe is False


def test_the_process_environment_is_read_by_the_constructor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAGACITY_SHOP_PORT", "7000")
    assert _Shop().port == 7000
    assert _Shop(port=1).port == 1


def test_a_bad_value_is_refused_naming_its_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"port \(SAGACITY_SHOP_PORT\)"):
        _Shop.from_env({"SAGACITY_SHOP_PORT": "eighty"})
    with pytest.raises(ConfigurationError, match="nonsense"):
        _Shop.from_env({}, nonsense=1)
