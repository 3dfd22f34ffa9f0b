"""The approvals API's edge: the body size limit, UTF-8 bodies and the insecure-dev mark.

An ASGI middleware, so the limit holds before FastAPI reads a byte of the body, and every
response of a service run with ``--insecure-dev`` says so in a header.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

INSECURE_HEADER = "X-Sagacity-Insecure-Dev"
INSECURE_VALUE = "approver identity is taken from the request body and NOT authenticated"
DEFAULT_MAX_BODY = 256 * 1024


class Limits:
    """ASGI middleware: body size limit, UTF-8 bodies, and the insecure-dev header."""

    def __init__(self, app: ASGIApp, *, max_body: int, insecure: bool) -> None:
        self.app = app
        self.max_body = max_body
        self.insecure = insecure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        insecure = self.insecure

        async def send_marked(message: Message) -> None:
            if insecure and message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((INSECURE_HEADER.lower().encode(), INSECURE_VALUE.encode()))
                message = {**message, "headers": headers}
            await send(message)

        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await self._refuse(send_marked, 413, f"request body over {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._refuse(send_marked, 413, f"request body over {self.max_body} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                await self._refuse(send_marked, 422, "request body is not valid UTF-8")
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_marked)

    @staticmethod
    async def _refuse(send: Send, status: int, detail: str) -> None:
        response = JSONResponse({"detail": detail}, status_code=status)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})
