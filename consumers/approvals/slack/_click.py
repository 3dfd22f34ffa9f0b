"""A click on a request's message, read from an interactivity body Slack signed.

Slack posts ``application/x-www-form-urlencoded`` with one field, ``payload``, a JSON object
(``type: block_actions``).  Only what a decision needs is taken, each value checked against its
domain: the clicker's user id, the button, and the request the button names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from sagacity.consumers.approvals._api_models import MAX_SEQ, SAGA_ID_PATTERN
from sagacity.consumers.approvals.slack._blocks import APPROVE, REJECT
from sagacity.errors import InvalidArgumentError

_USER = re.compile(r"^[UW][A-Z0-9]{2,20}$")
_CHANNEL = re.compile(r"^[A-Z0-9]{2,30}$")
_TS = re.compile(r"^[0-9]{1,12}\.[0-9]{1,8}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")
_SAGA = re.compile(SAGA_ID_PATTERN)


@dataclass(frozen=True, kw_only=True)
class Click:
    """A press of Approve or Reject."""

    user: str
    approve: bool
    saga_id: str
    seq: int
    request_hash: str | None
    channel: str | None
    message_ts: str | None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"the interaction's {what} is not an object")
    return value


def _matching(value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidArgumentError(f"the interaction's {what} is malformed")
    return value


def _optional(value: Any, pattern: re.Pattern[str], what: str) -> str | None:
    return None if value is None else _matching(value, pattern, what)


def parse_click(body: bytes) -> Click | None:
    """The decision a verified body asks for; ``None`` for an interaction that decides nothing
    (the console link's button, any other kind).

    Raises:
        InvalidArgumentError: the body is not a block action of the shape Slack sends.
    """
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=4)
        payload = json.loads(fields["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
        raise InvalidArgumentError(f"the interaction body is not Slack's form: {exc}") from exc
    payload = _object(payload, "payload")
    if payload.get("type") != "block_actions":
        return None
    actions = payload.get("actions")
    if not isinstance(actions, list) or len(actions) != 1:
        raise InvalidArgumentError("the interaction names no single action")
    action = _object(actions[0], "action")
    kind = action.get("action_id")
    if kind not in (APPROVE, REJECT):
        return None
    user = _matching(_object(payload.get("user"), "user").get("id"), _USER, "user id")
    try:
        named = json.loads(action.get("value") or "")
    except ValueError as exc:
        raise InvalidArgumentError("the button names no request") from exc
    named = _object(named, "button value")
    seq = named.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        raise InvalidArgumentError("the button's seq is out of range")
    container = payload.get("container")
    container = container if isinstance(container, dict) else {}
    return Click(
        user=user,
        approve=kind == APPROVE,
        saga_id=_matching(named.get("saga"), _SAGA, "saga id"),
        seq=seq,
        request_hash=_optional(named.get("request_hash"), _HASH, "request hash"),
        channel=_optional(container.get("channel_id"), _CHANNEL, "channel"),
        message_ts=_optional(container.get("message_ts"), _TS, "message ts"),
    )
