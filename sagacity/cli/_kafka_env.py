"""The journal's Kafka options of a command, and the settings they make.

A command that reaches the journal takes ``--bootstrap-servers`` and ``--topic`` over the shared
variables (``SAGACITY_BOOTSTRAP_SERVERS``, ``SAGACITY_TOPIC``) and reads the journal's settings
from that environment, the same way every service does (``sagacity._env``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sagacity.errors import ConfigurationError

if TYPE_CHECKING:
    from sagacity.producer import KafkaJournalSettings

F = TypeVar("F", bound=Callable[..., Any])


def kafka_options(func: F) -> F:
    """``--bootstrap-servers`` and ``--topic``, defaulting to the shared variables."""
    func = click.option(
        "--topic",
        default=None,
        help="The journal topic [default: $SAGACITY_TOPIC or sagacity.journal].",
    )(func)
    return click.option(
        "--bootstrap-servers",
        "bootstrap",
        metavar="HOST:PORT[,…]",
        help="Kafka bootstrap servers [default: $SAGACITY_BOOTSTRAP_SERVERS].",
    )(func)


def kafka_env(
    bootstrap: str | None, topic: str | None = None
) -> tuple[dict[str, str], KafkaJournalSettings]:
    """The process's environment with the command's options over it, and the journal's Kafka
    settings read from it.

    Raises:
        click.UsageError: no bootstrap servers, or a setting that does not parse.
    """
    from sagacity._env import kafka_settings_from_env

    env = dict(os.environ)
    if bootstrap:
        env["SAGACITY_BOOTSTRAP_SERVERS"] = bootstrap
    if topic:
        env["SAGACITY_TOPIC"] = topic
    try:
        return env, kafka_settings_from_env(env)
    except ConfigurationError as exc:
        raise click.UsageError(f"{exc} (or pass --bootstrap-servers)") from exc
