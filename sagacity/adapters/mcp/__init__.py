"""MCP: Sagacity's wrapped tools served over the Model Context Protocol (the ``mcp`` SDK).

``sagacity serve mcp --tools myapp.tools:Bank`` (stdio or streamable HTTP) runs
:class:`SagacityMCP`: each tool an MCP tool, each call journaled in the session's saga, gated
calls suspended for approval and resumed by calling again with ``_meta`` naming the request.
See docs/mcp.md and docs/adr/0020-mcp-saga-scope.md.  Needs the ``mcp`` extra.
"""

from sagacity.adapters.mcp._http import BearerAuth, bearer_token
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

__all__ = [
    "APPROVAL_REFUSED",
    "REVERSIBILITY_META",
    "SAGA_META",
    "SAGA_REFUSED",
    "SEQ_META",
    "BearerAuth",
    "SagacityMCP",
    "SessionSagas",
    "annotations_for",
    "bearer_token",
]
