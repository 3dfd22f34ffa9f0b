"""A small MCP server with the seed's tools, run as the upstream of ``sagacity mcp proxy``.

``python -m tests.mcp_server.upstream`` (stdio). Tickets live in the JSON file named by
``SAGACITY_TEST_UPSTREAM_STATE`` (so several server processes share them); every call is
appended to ``SAGACITY_TEST_CALL_LOG``. Writes return their own undo (``update_ticket_status``)
or say none exists (``refund_invoice``); the access grant refuses the admin role itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from tests.approvals.tools import _record

server = MCPServer("helpdesk")


def _state() -> dict[str, Any]:
    path = Path(os.environ["SAGACITY_TEST_UPSTREAM_STATE"])
    if not path.exists():
        return {"tickets": {"T-4003": "pending", "T-4004": "open"}}
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _save(state: dict[str, Any]) -> None:
    Path(os.environ["SAGACITY_TEST_UPSTREAM_STATE"]).write_text(json.dumps(state), "utf-8")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def run_query(sql: str) -> str:
    """Run a read-only query."""
    _record("run_query", sql=sql)
    return json.dumps({"rows": [[1]]})


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def update_ticket_status(ticket_id: str, status: str) -> str:
    """Set a ticket's status; returns the call that sets it back."""
    _record("update_ticket_status", ticket_id=ticket_id, status=status)
    state = _state()
    if ticket_id not in state["tickets"]:
        raise ToolError(f"no ticket {ticket_id}")
    previous = state["tickets"][ticket_id]
    state["tickets"][ticket_id] = status
    _save(state)
    return json.dumps(
        {
            "changed": True,
            "ticket_id": ticket_id,
            "status": status,
            "previous_status": previous,
            "undo": {
                "tool": "update_ticket_status",
                "arguments": {"ticket_id": ticket_id, "status": previous},
            },
        }
    )


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def place_hold(sku: str) -> str:
    """Hold a unit of stock; the hold is released by its id."""
    _record("place_hold", sku=sku)
    return json.dumps({"hold_id": f"H-{sku}", "sku": sku})


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def release_hold(hold_id: str, sku: str) -> str:
    """Release a hold."""
    _record("release_hold", hold_id=hold_id, sku=sku)
    return json.dumps({"released": hold_id})


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def refund_invoice(invoice_id: str, amount: int) -> str:
    """Refund an invoice: money leaves, nothing brings it back."""
    _record("refund_invoice", invoice_id=invoice_id, amount=str(amount))
    return json.dumps({"changed": True, "invoice_id": invoice_id, "undo": None})


@server.tool()
def grant_agent_access(principal: str, role: str) -> str:
    """Grant an agent a role (never admin)."""
    if role == "admin":
        raise ToolError("granting the admin role is not delegated to an agent")
    _record("grant_agent_access", principal=principal, role=role)
    return json.dumps({"granted": role, "principal": principal})


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def export_tickets(seconds: float) -> str:
    """Export tickets slowly."""
    _record("export_tickets", seconds=str(seconds))
    time.sleep(seconds)
    return "exported"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def crash_server() -> str:
    """Exit the server process mid-call."""
    _record("crash_server")
    os._exit(3)


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def garble_reply() -> str:
    """Answer with something that is not JSON-RPC, then exit."""
    _record("garble_reply")
    sys.stdout.write("this is not json-rpc\n")
    sys.stdout.flush()
    os._exit(4)


if __name__ == "__main__":
    server.run()
