"""``sagacity approvals grant``, ``grants`` and ``revoke``: standing grants over the HTTP API.

A grant lets a conversation saga's agent run one tool without a new request for calls whose
arguments satisfy every ``--rule``, until ``--for`` has passed or the grant is revoked
(docs/operations/grants.md).  The service signs the grant and the revocation with its approvals
key and records the token's principal as the grantor.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from sagacity.cli._options import json_option, parse_duration
from sagacity.cli.approvals import _Client, _emit, _table, _when, approvals


def _grant_text(g: dict[str, Any]) -> str:
    lines = [
        f"grant       {g['grant_id']} (seq {g['seq']} of saga {g['saga_id']})",
        f"tool        {g['tool']}",
        f"rules       {g['rules']}",
        f"until       {_when(g['expires_at_us'])}",
        f"agent       {g['agent'] or '-'}",
        f"granted by  {g['granted_by']} at {_when(g['granted_at_us'])}",
        f"status      {g['status']}" + (f" ({g['reason']})" if g.get("reason") else ""),
    ]
    if g.get("revoked_by"):
        lines.append(f"revoked by  {g['revoked_by']} at {_when(g['revoked_at_us'])}")
    return "\n".join(lines)


@approvals.command("grant")
@click.argument("saga_id")
@click.argument("tool")
@click.option(
    "--rule",
    "rules",
    multiple=True,
    required=True,
    help="An argument rule every covered call satisfies (repeat for more): 'amount <= 100', "
    "'to in [\"a@example.com\"]'.",
)
@click.option(
    "--for",
    "lasting",
    default="1h",
    show_default=True,
    help="How long the grant stands: 90s, 15m, 2h, 7d (at most 30 days).",
)
@json_option
@click.pass_obj
def grant(client: _Client, saga_id: str, tool: str, rules: tuple[str, ...], lasting: str) -> None:
    """Grant TOOL for the conversation saga SAGA_ID under the rules, signed by the service."""
    seconds = int(parse_duration(lasting))
    body = {"tool": tool, "rules": list(rules), "ttl_s": seconds}
    data = client.call("POST", f"/sagacity/grant/{quote(saga_id, safe='')}", body=body)
    _emit(client, data, _grant_text(data))


@approvals.command("grants")
@click.argument("saga_id")
@json_option
@click.pass_obj
def grants(client: _Client, saga_id: str) -> None:
    """List the saga's standing grants, each with its standing now."""
    data = client.call("GET", f"/sagacity/grants/{quote(saga_id, safe='')}")
    rows = [
        [
            g["grant_id"],
            g["tool"],
            g["rules"] or "-",
            _when(g["expires_at_us"]),
            g["granted_by"] or "-",
            g["status"] + (f" ({g['reason']})" if g.get("reason") else ""),
        ]
        for g in data
    ]
    header = ["grant", "tool", "rules", "until", "granted by", "status"]
    _emit(client, data, _table(rows, header) if rows else "no grants")


@approvals.command("revoke")
@click.argument("saga_id")
@click.argument("grant_id")
@json_option
@click.pass_obj
def revoke(client: _Client, saga_id: str, grant_id: str) -> None:
    """Revoke a grant: from its signed revocation on, it covers no call."""
    path = f"/sagacity/revoke/{quote(saga_id, safe='')}/{quote(grant_id, safe='')}"
    data = client.call("POST", path)
    _emit(client, data, _grant_text(data))
