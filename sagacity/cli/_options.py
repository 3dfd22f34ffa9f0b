"""Click options the services share, read from ``SAGACITY_<SERVICE>_X`` then ``SAGACITY_X``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sagacity.config._defaults import ALLOW_CLEAR_DATA_SETTING, DEFAULT_TOPIC

F = TypeVar("F", bound=Callable[..., Any])


JSON_META = "sagacity.json"
"""``click.Context.meta`` key set when ``--json`` was given after a subcommand."""


def _store_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META] = True
        if hasattr(ctx.obj, "as_json"):  # a group's state object made before this subcommand
            ctx.obj.as_json = True
    return value


def json_option(func: F) -> F:
    """Accept ``--json`` after a subcommand too (``sagacity approvals list --json``).

    The flag is recorded in the context's shared ``meta`` (read with :func:`wants_json`) and
    set on the group's state object when it has an ``as_json`` attribute.
    """
    return click.option(
        "--json",
        "_json_after",
        is_flag=True,
        expose_value=False,
        callback=_store_json,
        help="Machine-readable JSON output.",
    )(func)


def wants_json(ctx: click.Context, given: bool = False) -> bool:
    """Whether ``--json`` was given here (``given``) or after a subcommand."""
    return given or bool(ctx.meta.get(JSON_META))


def service_envvars(service: str, name: str) -> list[str]:
    """The variables for setting ``name`` of ``service``: the service's own one first.

    ``service_envvars("ARCHIVE", "TOPIC")`` is
    ``["SAGACITY_ARCHIVE_TOPIC", "SAGACITY_TOPIC"]``.
    """
    return [f"SAGACITY_{service}_{name}", f"SAGACITY_{name}"]


class AliasedOption(click.Option):
    """An option whose first name alone is listed in help; its other names (the spellings of
    earlier releases) are still accepted."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, envvar = self.opts, self.envvar
        self.opts = names[:1]
        if isinstance(envvar, list | tuple):
            self.envvar = envvar[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.envvar = names, envvar


def group_option(service: str, *, default: str) -> Callable[[F], F]:
    """Add ``--group`` (``SAGACITY_<SERVICE>_GROUP``): the consumer group of the service.

    ``--group-id`` and ``SAGACITY_<SERVICE>_GROUP_ID`` are accepted too.
    """
    return click.option(
        "--group",
        "--group-id",
        "group",
        cls=AliasedOption,
        envvar=[f"SAGACITY_{service}_GROUP", f"SAGACITY_{service}_GROUP_ID"],
        default=default,
        show_default=True,
        show_envvar=True,
        help="Consumer group shared by every replica.",
    )


def port_option(
    service: str, *, default: int | None, help: str, old: str | None = None
) -> Callable[[F], F]:
    """Add ``--port`` (``SAGACITY_<SERVICE>_PORT``): where the service's HTTP endpoint listens.

    ``old`` (``"HTTP"``, ``"METRICS"``) is the prefix of an earlier spelling still accepted:
    ``--http-port`` and ``SAGACITY_<SERVICE>_HTTP_PORT``.
    """
    names = ["--port"] + ([f"--{old.lower()}-port"] if old else [])
    envvars = [f"SAGACITY_{service}_PORT"] + ([f"SAGACITY_{service}_{old}_PORT"] if old else [])
    return click.option(
        *names,
        "port",
        cls=AliasedOption,
        type=click.IntRange(0, 65535),
        envvar=envvars,
        default=default,
        show_default=default is not None,
        show_envvar=True,
        help=help,
    )


def host_option(service: str, *, default: str, old: str | None = None) -> Callable[[F], F]:
    """Add ``--host`` (``SAGACITY_<SERVICE>_HOST``), the listen address of ``--port``."""
    names = ["--host"] + ([f"--{old.lower()}-host"] if old else [])
    envvars = [f"SAGACITY_{service}_HOST"] + ([f"SAGACITY_{service}_{old}_HOST"] if old else [])
    return click.option(
        *names,
        "host",
        cls=AliasedOption,
        envvar=envvars,
        default=default,
        show_default=True,
        show_envvar=True,
        help="Listen address of --port.",
    )


def log_level_option(service: str) -> Callable[[F], F]:
    """Add ``--log-level`` (``SAGACITY_<SERVICE>_LOG_LEVEL``, then ``SAGACITY_LOG_LEVEL``)."""
    return click.option(
        "--log-level",
        envvar=service_envvars(service, "LOG_LEVEL"),
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO",
        show_default=True,
        show_envvar=True,
        help="Log records at this level and above, as JSON lines on stderr.",
    )


def service_options(service: str) -> Callable[[F], F]:
    """What every service's start takes: ``--log-level`` and ``--allow-clear-data``."""

    def decorate(func: F) -> F:
        return log_level_option(service)(allow_clear_data_option(func))

    return decorate


def bootstrap_servers_option(service: str) -> Callable[[F], F]:
    """Add a required ``--bootstrap-servers`` read from the service's variables."""
    return click.option(
        "--bootstrap-servers",
        envvar=service_envvars(service, "BOOTSTRAP_SERVERS"),
        required=True,
        help="Kafka bootstrap servers.",
    )


def database_url_option(service: str, *, help: str) -> Callable[[F], F]:
    """Add a required ``--database-url`` read from the service's variables."""
    return click.option(
        "--database-url",
        envvar=service_envvars(service, "DATABASE_URL"),
        required=True,
        help=help,
    )


def topic_option(service: str, *, show_default: bool = True) -> Callable[[F], F]:
    """Add ``--topic`` (default ``sagacity.journal``) read from the service's variables."""
    return click.option(
        "--topic",
        envvar=service_envvars(service, "TOPIC"),
        default=DEFAULT_TOPIC,
        show_default=show_default,
    )


def _allow_clear_data(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """``--allow-clear-data`` is its variable, set for the command's run: whatever starts
    from the environment (:func:`sagacity._env.starting_keys`) reads it there."""
    import os

    if value and not os.environ.get(ALLOW_CLEAR_DATA_SETTING):
        os.environ[ALLOW_CLEAR_DATA_SETTING] = "1"
        ctx.call_on_close(lambda: os.environ.pop(ALLOW_CLEAR_DATA_SETTING, None))
    return value


def allow_clear_data_option(func: F) -> F:
    """Add ``--allow-clear-data`` (``SAGACITY_ALLOW_CLEAR_DATA``): start without a
    key-encryption key, which is otherwise refused (:func:`sagacity._env.refuse_clear_data`)."""
    return click.option(
        "--allow-clear-data",
        is_flag=True,
        envvar=ALLOW_CLEAR_DATA_SETTING,
        show_envvar=True,
        expose_value=False,
        callback=_allow_clear_data,
        help="Start without a key-encryption key (SAGACITY_KEY_ENCRYPTION_KEY_FILE), refused "
        "otherwise: the journal's data is then written and archived in clear, and no saga "
        "can be erased.",
    )(func)


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``15m``, ``2h`` or ``30d`` (``m`` is minutes; see
    :mod:`sagacity.config._duration`).

    Raises:
        click.BadParameter: anything else.
    """
    from sagacity.config._duration import parse_seconds
    from sagacity.errors import DurationError

    try:
        return parse_seconds(text)
    except DurationError as exc:
        raise click.BadParameter(str(exc)) from exc
