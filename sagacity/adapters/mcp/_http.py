"""Bearer-token authentication in front of the MCP server's streamable HTTP transport."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sagacity.adapters.mcp._callers import Authenticate, bearer_token
from sagacity.errors import ConfigurationError, PermissionDeniedError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["Authenticate", "BearerAuth", "bearer_token"]

log = logging.getLogger("sagacity.mcp")


class BearerAuth:
    """ASGI middleware: every HTTP request needs a bearer token that ``authenticate`` knows.

    Unknown or missing tokens get 401 (``WWW-Authenticate: Bearer``); a known token that is
    not an agent's (an approver's, an auditor's) gets 403 with the line that says so; an
    authentication source that cannot answer (a principals file that no longer loads) gets
    503.  Tokens are never logged.
    """

    def __init__(self, app: ASGIApp, authenticate: Authenticate) -> None:
        self._app = app
        self._authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = bearer_token(headers.get("authorization"))
        try:
            principal = self._authenticate(token) if token else None
        except ConfigurationError as exc:
            log.error("authentication unavailable: %s", exc.message)
            await _answer(send, 503, "authentication is unavailable; see the server log")
            return
        except PermissionDeniedError as exc:
            log.warning("refused: %s", exc.message)
            await _answer(send, 403, exc.message)
            return
        if principal is None:
            await _answer(
                send, 401, "a bearer token from the principals file is required", bearer=True
            )
            return
        await self._app(scope, receive, send)


async def _answer(send: Send, status: int, message: str, *, bearer: bool = False) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="sagacity"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
