"""A real MCP server (the official SDK, over stdio) for the adapter tests: a read-only tool and
a destructive one, each saying so in its annotations.  Run as a script."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server: MCPServer = MCPServer("catalogue")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup_price(sku: str) -> str:
    """The price of a product."""
    return f"{sku}: 3"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def delist(sku: str) -> str:
    """Take a product off the catalogue."""
    return f"delisted {sku}"


if __name__ == "__main__":
    server.run("stdio")
