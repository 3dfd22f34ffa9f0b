"""The Slack integration's configuration: two secret files, a channel, the Web API's URL.

The signing secret and the bot token are read from files (never from the command line, where
``ps`` and shell histories show them); a missing, unreadable or empty file stops the service
with the option's name in the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sagacity.consumers.approvals._settings import ApprovalsSettings
from sagacity.errors import ConfigurationError

_MAX_SECRET = 4096


@dataclass(frozen=True, kw_only=True)
class SlackConfig:
    """What the Slack integration runs with."""

    signing_secret: str
    bot_token: str
    channel: str
    api_url: str


def _secret(path: str, option: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{option} {path}: cannot read the file: {exc}") from exc
    if len(raw) > _MAX_SECRET:
        raise ConfigurationError(f"{option} {path}: over {_MAX_SECRET} bytes, not a Slack secret")
    try:
        value = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{option} {path}: not UTF-8 text") from exc
    if not value:
        raise ConfigurationError(f"{option} {path}: the file is empty")
    if any(c.isspace() for c in value):
        raise ConfigurationError(f"{option} {path}: holds more than one word (one secret a file)")
    return value


def slack_config(settings: ApprovalsSettings) -> SlackConfig | None:
    """The Slack integration the settings ask for; ``None`` when they name none.

    Raises:
        ConfigurationError: one secret file without the other, no channel, no principals file
            (``--insecure-dev``), or a file that is missing, unreadable or empty.
    """
    secret_file = settings.slack_signing_secret_file
    token_file = settings.slack_bot_token_file
    if secret_file is None and token_file is None:
        if settings.slack_channel:
            raise ConfigurationError(
                "--slack-channel needs --slack-signing-secret-file and --slack-bot-token-file"
            )
        return None
    if secret_file is None or token_file is None:
        raise ConfigurationError(
            "deciding in Slack needs both --slack-signing-secret-file (to verify the clicks) and "
            "--slack-bot-token-file (to post the requests)"
        )
    if not settings.slack_channel:
        raise ConfigurationError(
            "deciding in Slack needs --slack-channel: the channel requests are posted to"
        )
    if settings.auth_file is None:
        raise ConfigurationError(
            "deciding in Slack needs the principals file (--auth): a click is decided as the "
            "principal whose slack_user is the clicker; --insecure-dev has none"
        )
    return SlackConfig(
        signing_secret=_secret(secret_file, "--slack-signing-secret-file"),
        bot_token=_secret(token_file, "--slack-bot-token-file"),
        channel=settings.slack_channel,
        api_url=settings.slack_api_url,
    )
