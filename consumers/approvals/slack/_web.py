"""The bot's Slack Web API calls, through Slack's own SDK (``slack_sdk.WebClient``).

Three calls: ``chat.postMessage`` (a new request), ``chat.update`` (its outcome) and
``chat.postEphemeral`` (a refusal only the clicker sees).  The base URL is a setting, so tests
point the client at a loopback server that records what the bot sends.  Every failure of the
SDK or of the network is mapped here, once, to :class:`SlackCallError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sagacity.errors import SagacityError

log = logging.getLogger("sagacity.approvals.slack")

DEFAULT_API_URL = "https://slack.com/api/"
TIMEOUT_S = 10


class SlackCallError(SagacityError):
    """A Slack Web API call failed (the network, or Slack answered ``ok: false``)."""


@dataclass(frozen=True, kw_only=True)
class Message:
    """A message's text (the notification's fallback) and its Block Kit blocks."""

    text: str
    blocks: list[dict[str, Any]]


class SlackWeb:
    """The bot's Web API client.

    Args:
        token: the bot token (``xoxb-…``), from its file.
        base_url: the Web API's base URL (default Slack's).
    """

    def __init__(self, token: str, *, base_url: str = DEFAULT_API_URL) -> None:
        from slack_sdk import WebClient
        from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

        url = base_url if base_url.endswith("/") else base_url + "/"
        self._client = WebClient(token=token, base_url=url, timeout=TIMEOUT_S)
        # Slack answers 429 with Retry-After under load: the SDK waits and tries again.
        self._client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))

    def post(self, channel: str, message: Message) -> tuple[str, str]:
        """Post ``message`` to ``channel``; returns the message's ``(channel id, ts)``.

        Raises:
            SlackCallError: the call failed.
        """
        answer = self._call(
            "chat.postMessage", channel=channel, text=message.text, blocks=message.blocks
        )
        channel_id, ts = answer.get("channel"), answer.get("ts")
        if not isinstance(channel_id, str) or not isinstance(ts, str):
            raise SlackCallError("chat.postMessage answered without a channel and ts")
        return channel_id, ts

    def update(self, channel: str, ts: str, message: Message) -> None:
        """Rewrite the message at ``channel``/``ts``.

        Raises:
            SlackCallError: the call failed.
        """
        self._call("chat.update", channel=channel, ts=ts, text=message.text, blocks=message.blocks)

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        """Tell ``user`` alone, in ``channel``.

        Raises:
            SlackCallError: the call failed.
        """
        self._call("chat.postEphemeral", channel=channel, user=user, text=text)

    def _call(self, method: str, **arguments: Any) -> dict[str, Any]:
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            response = self._client.api_call(method, json=arguments)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            raise SlackCallError(f"Slack refused {method}: {error or exc}") from exc
        except (SlackClientError, OSError, ValueError) as exc:
            raise SlackCallError(f"Slack's {method} could not be called: {exc}") from exc
        data = response.data
        if not isinstance(data, dict):
            raise SlackCallError(f"Slack's {method} answered with no JSON object")
        return data
