"""The Slack messages of a request: what is posted, and what it is rewritten to.

A request's message shows its payload as the console's request page formats it (JSON pretty
printed, each redacted field masked: the console's own formatter), the SHA-256 of the exact
stored payload and the request entry's hash, and Approve and Reject buttons whose value names
the request (saga, seq and that entry hash).  An approval is bound to that hash at click time,
as the console's form binds it.  A payload too long to show whole is not approvable here: the
message says so and offers the console.

Every text a writer chose (tool name, saga id, payload) goes out as ``plain_text`` or inside a
preformatted rich-text element, so none of it is read as Slack markup (no forged links or
mentions).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from sagacity.chain import payload_sha256
from sagacity.consumers.approvals.console._requests import _pretty, _redacted
from sagacity.consumers.approvals.slack._web import Message
from sagacity.ports import RequestRow, RowState

APPROVE = "sagacity_approve"
REJECT = "sagacity_reject"
OPEN = "sagacity_open"
"""The console link's button: Slack reports its click too; nothing is decided on it."""
MAX_SHOWN = 2800
"""The longest payload shown (a text element holds 3,000 characters): a longer one is decided
in the console, where it is shown whole."""
_PLAIN_MAX = 150  # a header's plain text


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    return {"type": "plain_text", "text": text[:limit], "emoji": False}


def button_value(row: RequestRow) -> str:
    """What a button carries back: the request it was shown for (saga, seq, entry hash)."""
    return json.dumps(
        {"saga": row.saga_id, "seq": row.seq, "request_hash": row.entry_hash},
        separators=(",", ":"),
    )


def console_link(public_url: str, row: RequestRow) -> str:
    """The request's page in the console."""
    return f"{public_url.rstrip('/')}/ui/requests/{quote(row.saga_id, safe='')}/{row.seq}"


def _shown(row: RequestRow) -> str:
    """The payload as the console formats it (redacted fields masked), else its exact text."""
    pretty = _pretty(row.payload)
    return pretty if pretty is not None else row.payload


def _facts(row: RequestRow) -> list[dict[str, Any]]:
    computed = payload_sha256(row.payload)
    lines = [
        f"payload SHA-256: {computed}",
        f"request entry hash: {row.entry_hash or 'unknown'}",
        f"{len(row.signed_by)} of {row.signatures_required} signatures",
    ]
    if row.payload_sha256 is not None and row.payload_sha256 != computed:
        lines.append("WARNING: the payload does NOT match the request's recorded hash")
    redacted = _redacted(row.payload)
    if redacted:
        lines.append(f"never journaled in clear (shown masked): {', '.join(redacted)}")
    return [{"type": "context", "elements": [_plain(line) for line in lines]}]


def request_message(row: RequestRow, *, public_url: str) -> Message:
    """The message posted for an open request: payload, hashes, Approve and Reject."""
    title = f"Approval needed: {row.tool} ({row.reversibility})"
    shown = _shown(row)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(title, _PLAIN_MAX)},
        {"type": "section", "text": _plain(f"saga {row.saga_id}, step {row.seq}")},
    ]
    approvable = len(shown) <= MAX_SHOWN and row.entry_hash is not None
    if len(shown) <= MAX_SHOWN:
        blocks.append(
            {
                "type": "rich_text",
                "elements": [
                    {
                        "type": "rich_text_preformatted",
                        "elements": [{"type": "text", "text": shown}],
                    }
                ],
            }
        )
    else:
        blocks.append(
            {
                "type": "section",
                "text": _plain(
                    f"The payload ({len(shown)} characters) is too long to show here whole: "
                    "open it in the console to approve it."
                ),
            }
        )
    blocks.extend(_facts(row))
    value = button_value(row)
    buttons: list[dict[str, Any]] = []
    if approvable:
        buttons.append(
            {
                "type": "button",
                "action_id": APPROVE,
                "style": "primary",
                "text": _plain("Approve"),
                "value": value,
            }
        )
    buttons.append(
        {
            "type": "button",
            "action_id": REJECT,
            "style": "danger",
            "text": _plain("Reject"),
            "value": value,
        }
    )
    buttons.append(
        {
            "type": "button",
            "action_id": OPEN,
            "text": _plain("Open in the console"),
            "url": console_link(public_url, row),
        }
    )
    blocks.append({"type": "actions", "block_id": "sagacity_decision", "elements": buttons})
    return Message(text=f"{title} in saga {row.saga_id}", blocks=blocks)


def outcome(row: RequestRow) -> str | None:
    """What became of the request, in a sentence; ``None`` while it waits for a decision."""
    signers = ", ".join(row.signed_by)
    if row.state is RowState.PENDING:
        return None
    if row.state is RowState.APPROVED:
        return f"Approved by {signers}: the agent may resume the call with this payload."
    if row.state is RowState.RESUMED:
        return f"Approved by {signers} and resumed."
    if row.state is RowState.REJECTED:
        return f"Rejected by {row.decided_by or 'an approver'}."
    if row.state is RowState.EXPIRED:
        return "Expired: nobody decided before its deadline."
    if row.state is RowState.REFUSED:
        return f"Approved by {signers}; the resume was refused."
    return "Closed: the saga ended or was handed to compensation."


def outcome_message(row: RequestRow, *, public_url: str) -> Message:
    """The request's message rewritten: the outcome and who decided, with no buttons, or, for a
    request still short of signatures, who signed so far with the buttons kept."""
    said = outcome(row)
    if said is None:
        message = request_message(row, public_url=public_url)
        if row.signed_by:
            signed = f"Signed by {', '.join(row.signed_by)} so far; waiting for another approver."
            message.blocks.insert(-1, {"type": "section", "text": _plain(signed)})
        return message
    title = f"{row.tool} ({row.reversibility})"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(title, _PLAIN_MAX)},
        {"type": "section", "text": _plain(f"saga {row.saga_id}, step {row.seq}")},
        {"type": "section", "text": _plain(said)},
        *_facts(row),
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": OPEN,
                    "text": _plain("Open in the console"),
                    "url": console_link(public_url, row),
                }
            ],
        },
    ]
    return Message(text=f"{title} in saga {row.saga_id}: {said}", blocks=blocks)
