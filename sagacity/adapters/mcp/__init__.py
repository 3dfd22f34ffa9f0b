"""MCP: Sagacity's wrapped tools served over the Model Context Protocol (the ``mcp`` SDK).

``sagacity serve mcp --tools myapp.tools:Bank`` (stdio or streamable HTTP) runs
:class:`SagacityMCP`: each tool an MCP tool, each call journaled in the session's saga, gated
calls suspended for approval and resumed by calling again with ``_meta`` naming the request.
Its callers are the principals file's agents, each served its own tools.
``sagacity mcp proxy`` fronts any MCP server the same way (:func:`proxied_tools`: its tools
declared by a tool policy).  See docs/mcp.md and docs/adr/0020-mcp-saga-scope.md.  Needs the
``mcp`` extra.
"""

from sagacity.adapters.mcp._callers import TOOL_REFUSED, Caller, ToolScope
from sagacity.adapters.mcp._http import BearerAuth, bearer_token
from sagacity.adapters.mcp._proxy import ProxiedTool, proxied_tools, register
from sagacity.adapters.mcp._server import (
    APPROVAL_REFUSED,
    REVERSIBILITY_META,
    SAGA_META,
    SAGA_REFUSED,
    SEQ_META,
    SagacityMCP,
    annotations_for,
)
from sagacity.adapters.mcp._sessions import SessionSagas
from sagacity.adapters.mcp._upstream import Upstream, UpstreamError, UpstreamToolError

__all__ = [
    "APPROVAL_REFUSED",
    "REVERSIBILITY_META",
    "SAGA_META",
    "SAGA_REFUSED",
    "SEQ_META",
    "TOOL_REFUSED",
    "BearerAuth",
    "Caller",
    "ProxiedTool",
    "SagacityMCP",
    "SessionSagas",
    "ToolScope",
    "Upstream",
    "UpstreamError",
    "UpstreamToolError",
    "annotations_for",
    "bearer_token",
    "proxied_tools",
    "register",
]
