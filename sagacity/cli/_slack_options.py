"""The Slack options of ``sagacity serve approvals`` (docs/operations/slack.md), as one
decorator: the command receives them as one ``slack`` mapping of settings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from sagacity.cli._options import service_envvars

SETTINGS = (
    "slack_signing_secret_file",
    "slack_bot_token_file",
    "slack_channel",
    "slack_api_url",
)
"""The :class:`ApprovalsSettings` fields the options set."""


def _option(name: str, help_text: str, *, path: bool = False) -> Callable[..., Any]:
    return click.option(
        f"--{name.replace('_', '-')}",
        name,
        type=click.Path(dir_okay=False) if path else None,
        envvar=service_envvars("APPROVALS", name.upper()),
        show_envvar=True,
        default=None,
        help=help_text,
    )


_OPTIONS = (
    _option(
        "slack_signing_secret_file",
        "File holding the Slack app's signing secret: every click in Slack is verified with it "
        "(docs/operations/slack.md).",
        path=True,
    ),
    _option(
        "slack_bot_token_file",
        "File holding the Slack bot token (xoxb-…) requests are posted with.",
        path=True,
    ),
    _option("slack_channel", "The Slack channel (its id) new requests are posted to."),
    _option("slack_api_url", "Slack's Web API base URL [default: https://slack.com/api/]."),
)


def slack_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the Slack options to ``command``, which receives them as ``slack={setting: value}``."""

    @functools.wraps(command)
    def with_slack(**kwargs: Any) -> None:
        slack = {name: kwargs.pop(name) for name in SETTINGS}
        command(slack=slack, **kwargs)

    decorated: Callable[..., None] = with_slack
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated
