"""Who calls the MCP server's tools, and which tools they see.

Every call has a *caller*: the agent principal of a bearer token (streamable HTTP), or of the
token a stdio server was started with; with no principals file at all a stdio server serves
whoever started it, unscoped.  The principals file's agents (``role = "agent"``) are the only
principals accepted; each lists its tools, and :class:`ToolScope` serves it those alone: the
other tools are not listed, and calling one is refused before anything is journaled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from mcp.shared.exceptions import MCPError

from sagacity.errors import AuthenticationError, SagacityError

TOOL_REFUSED = -32003
"""JSON-RPC error code: the caller is not accepted, or the tool is not among its tools."""


class Caller(Protocol):
    """An agent principal, as the MCP server needs it."""

    @property
    def name(self) -> str:
        """The identity journaled as each call's ``caller``."""
        ...

    def may_call(self, tool: str) -> bool:
        """Whether it may list and call ``tool``."""
        ...


Authenticate = Callable[[str], Caller | None]
"""A bearer token to the agent holding it (``None``: unknown token).  Raises
``PermissionDeniedError`` for a known token that is not an agent's, ``ConfigurationError``
when the principals cannot be known."""

CallerSource = Callable[[Any], Caller]
"""The caller of a request (the transport's request object, ``None`` under stdio).  Raises a
:class:`~sagacity.errors.SagacityError` saying why there is none."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, if it is one."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _known(caller: Caller | None) -> Caller:
    if caller is None:
        raise AuthenticationError("the token is not (or no longer) in the principals file")
    return caller


def from_headers(authenticate: Authenticate) -> CallerSource:
    """Each HTTP request's caller, by its ``Authorization: Bearer`` header."""

    def source(request: Any) -> Caller:
        headers: Mapping[str, str] = getattr(request, "headers", None) or {}
        token = bearer_token(headers.get("authorization"))
        if token is None:
            raise AuthenticationError("a bearer token from the principals file is required")
        return _known(authenticate(token))

    return source


def from_token(authenticate: Authenticate, token: str) -> CallerSource:
    """One agent for every call (a stdio server started with its token), looked up again on
    each call so a revoked token stops at once."""
    return lambda _request: _known(authenticate(token))


def caller_of(source: CallerSource | None, request: Any) -> Caller | None:
    """The request's caller (``None``: no principals file, nothing scoped).

    Raises:
        MCPError: :data:`TOOL_REFUSED`, with the reason there is no caller.
    """
    if source is None:
        return None
    try:
        return source(request)
    except SagacityError as exc:
        raise MCPError(TOOL_REFUSED, exc.message) from exc


def refuse_tool(caller: Caller | None, tool: str) -> None:
    """Refuse ``caller`` a tool outside its tools.

    Raises:
        MCPError: :data:`TOOL_REFUSED`.
    """
    if caller is not None and not caller.may_call(tool):
        raise MCPError(TOOL_REFUSED, f"tool {tool!r} is not among the tools of {caller.name}")


class ToolScope:
    """Server middleware: each caller lists and calls its own tools only.

    A ``tools/list`` answer keeps the caller's tools; a ``tools/call`` of another tool is
    refused (:data:`TOOL_REFUSED`) before its arguments are read or anything is journaled.
    """

    def __init__(self, source: Callable[[], CallerSource | None]) -> None:
        self._source = source

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        method = getattr(ctx, "method", None)
        if method not in ("tools/list", "tools/call"):
            return await call_next(ctx)
        caller = caller_of(self._source(), getattr(ctx, "request", None))
        if method == "tools/call":
            params = getattr(ctx, "params", None) or {}
            name = params.get("name") if isinstance(params, Mapping) else None
            refuse_tool(caller, name if isinstance(name, str) else "")
            return await call_next(ctx)
        result = await call_next(ctx)
        if (
            caller is not None
            and isinstance(result, dict)
            and isinstance(result.get("tools"), list)
        ):
            result = {
                **result,
                "tools": [
                    t
                    for t in result["tools"]
                    if isinstance(t, Mapping) and caller.may_call(str(t.get("name")))
                ],
            }
        return result
