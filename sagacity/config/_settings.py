"""Typed settings read from ``SAGACITY_*`` variables through pydantic-settings.

Each setting ``x`` of a service ``S`` is read from ``SAGACITY_S_X`` first, then the shared
``SAGACITY_X``, then its default; keyword arguments win over both.  A field may list other
names (``env_names``) for spellings of earlier releases.  ``from_env(environ)`` reads a given
mapping instead of the process environment (tests, and the CLI's merged environment).
"""

from __future__ import annotations

import contextvars
import os
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sagacity.errors import ConfigurationError

_ENVIRON: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "sagacity_settings_environ", default=None
)


def _is_sequence(annotation: object) -> bool:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (tuple, list):
        return True
    return any(_is_sequence(arg) for arg in args)


class _SagacityEnv(PydanticBaseSettingsSource):
    """``SAGACITY_<SERVICE>_<NAME>`` then ``SAGACITY_<NAME>`` for each field; empty is unset."""

    def __init__(self, settings_cls: type[SagacitySettings]) -> None:
        super().__init__(settings_cls)
        self._cls = settings_cls
        given = _ENVIRON.get()
        self._env = os.environ if given is None else given

    def variables(self, name: str) -> list[str]:
        """The variables read for field ``name``, first wins."""
        names = [name.upper(), *self._cls.env_names.get(name, ())]
        service = self._cls.env_service
        own = [f"SAGACITY_{service}_{n}" for n in names] if service else []
        return [*own, *(f"SAGACITY_{n}" for n in names)]

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for variable in self.variables(field_name):
            value = self._env.get(variable)
            if value:
                if _is_sequence(field.annotation):
                    return tuple(value.split()), variable, False
                return value, variable, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            if name in self._cls.env_excluded:
                continue
            value, _, _ = self.get_field_value(field, name)
            if value is not None:
                found[name] = value
        return found


class SagacitySettings(BaseSettings):
    """Base of every settings object: frozen, unknown keywords refused, read from variables.

    Subclasses set ``env_service`` (``"APPROVALS"``) and, optionally, ``env_names`` (field
    name to further variable names, without the ``SAGACITY_`` prefix) and ``env_excluded``.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    env_service: ClassVar[str] = ""
    env_names: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    env_excluded: ClassVar[frozenset[str]] = frozenset()
    """Fields never read from a variable (an option only)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert issubclass(settings_cls, SagacitySettings)
        return (init_settings, _SagacityEnv(settings_cls))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """Settings from ``environ`` (default ``os.environ``), then ``overrides`` (not None).

        Raises:
            ConfigurationError: a value is missing or invalid; the message names the variable.
        """
        token = _ENVIRON.set(environ)
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            raise ConfigurationError(cls.describe(exc)) from exc
        finally:
            _ENVIRON.reset(token)

    @classmethod
    def describe(cls, exc: ValidationError) -> str:
        """One line naming each invalid or missing setting and the variables behind it."""
        problems = []
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else "settings"
            own = f"SAGACITY_{cls.env_service}_" if cls.env_service else "SAGACITY_"
            problems.append(f"{name} ({own}{name.upper()}): {error['msg']}")
        return f"invalid {cls.env_service.lower() or 'Sagacity'} settings: " + "; ".join(problems)
