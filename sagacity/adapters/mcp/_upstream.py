"""A client of the upstream MCP server a proxy fronts, callable from any thread.

The SDK's client session lives on an event loop of its own (an anyio blocking portal), so the
journaling hot path (a worker thread), the compensation runner (the service's threads) and the
proxy's own loop all call it the same way, with a bounded wait.  A session the upstream broke
(it exited, or answered with something that is not JSON-RPC) is reconnected on the next call.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx2
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, PaginatedRequestParams, TextContent, Tool
from mcp_types.jsonrpc import CONNECTION_CLOSED

from sagacity.errors import ConfigurationError, SagacityError

log = logging.getLogger("sagacity.mcp.upstream")


class UpstreamError(SagacityError):
    """The upstream MCP server could not be reached, timed out, or answered malformed."""


class UpstreamToolError(SagacityError):
    """The upstream tool ran and reported an error (``isError: true``)."""


class Upstream:
    """The upstream MCP server, over stdio (a command this process starts) or streamable HTTP.

    Args:
        command: the server's command line (``"node server.js --flag"``), split like a shell.
        url: the server's streamable HTTP endpoint.
        headers: HTTP headers for ``url`` (``Authorization: Bearer ...``).
        timeout_s: the longest one call may take before it is abandoned (journaled FAILED).
        start_timeout_s: the longest the upstream may take to start and answer the handshake.
        errlog: where a stdio server's stderr goes (default: this process's stderr).

    Raises:
        ConfigurationError: neither or both of ``command`` and ``url``; an empty command.
    """

    def __init__(
        self,
        *,
        command: str | Sequence[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        start_timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
        errlog: Any = None,
    ) -> None:
        if (command is None) == (url is None):
            raise ConfigurationError("give the upstream as a command or as a URL, not both")
        argv = shlex.split(command) if isinstance(command, str) else list(command or [])
        if command is not None and not argv:
            raise ConfigurationError("the upstream command is empty")
        if timeout_s <= 0:
            raise ConfigurationError("the upstream timeout must be positive")
        self._argv = argv
        self._url = url
        self._headers = dict(headers or {})
        self._timeout = timeout_s
        self._start_timeout = start_timeout_s
        self._env = dict(env) if env is not None else dict(os.environ)
        self._errlog = errlog
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._session: ClientSession | None = None
        self.describe = " ".join(argv) if argv else str(url)

    # -- connection -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[ClientSession]:
        async with contextlib.AsyncExitStack() as stack:
            if self._argv:
                params = StdioServerParameters(
                    command=self._argv[0], args=self._argv[1:], env=self._env
                )
                kwargs = {"errlog": self._errlog} if self._errlog is not None else {}
                read, write = await stack.enter_async_context(stdio_client(params, **kwargs))
            else:
                assert self._url is not None
                client = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=self._headers, timeout=self._timeout)
                )
                read, write = await stack.enter_async_context(
                    streamable_http_client(self._url, http_client=client)
                )
            session = await stack.enter_async_context(ClientSession(read, write))
            with _bounded(self._start_timeout):
                await session.initialize()
            yield session

    def start(self) -> None:
        """Connect (start the command, or open the HTTP session) and initialise.

        Raises:
            UpstreamError: the upstream does not start or does not answer the handshake.
        """
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._session is not None:
            return
        stack = contextlib.ExitStack()
        try:
            portal = stack.enter_context(start_blocking_portal())
            session = stack.enter_context(portal.wrap_async_context_manager(self._connect()))
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                stack.close()
            raise UpstreamError(
                f"the upstream MCP server ({self.describe}) did not start: {_describe(exc)}"
            ) from None
        self._stack, self._portal, self._session = stack, portal, session

    def _drop_locked(self) -> None:
        stack, self._stack, self._portal, self._session = self._stack, None, None, None
        if stack is not None:
            with contextlib.suppress(BaseException):
                stack.close()

    def close(self) -> None:
        """Close the session (and stop a stdio server)."""
        with self._lock:
            self._drop_locked()

    def __enter__(self) -> Upstream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ----------------------------------------------------------------------------
    def _run(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._start_locked()
            portal, session = self._portal, self._session
        assert portal is not None
        assert session is not None
        call = functools.partial(getattr(session, method), *args, **kwargs)
        try:
            return portal.call(_within, self._timeout, call)
        except TimeoutError:
            raise UpstreamError(
                f"{what}: the upstream MCP server did not answer within {self._timeout:g}s"
            ) from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise UpstreamError(
                    f"{what}: the upstream MCP server refused: {exc.message}"
                ) from None
            self._forget(session)
            raise UpstreamError(
                f"{what}: the upstream MCP server ({self.describe}) failed: the connection "
                "closed mid-call"
            ) from None
        except Exception as exc:
            # The session is broken (the server exited, or spoke something that is not
            # JSON-RPC): drop it, so the next call starts afresh.
            self._forget(session)
            raise UpstreamError(
                f"{what}: the upstream MCP server ({self.describe}) failed: {_describe(exc)}"
            ) from None

    def _forget(self, session: ClientSession) -> None:
        with self._lock:
            if self._session is session:
                self._drop_locked()

    def tools(self) -> list[Tool]:
        """Every tool the upstream lists (all pages).

        Raises:
            UpstreamError: as :meth:`call`.
        """
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = self._run("tools/list", "list_tools", params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def call(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        """Call tool ``name`` upstream; its result, an error result included.

        Raises:
            UpstreamError: no answer within the timeout, the server exited, or its answer was
                not a valid result.
        """
        return self._run(f"tool {name!r}", "call_tool", name, dict(arguments))  # type: ignore[no-any-return]

    def call_checked(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Call tool ``name`` and return its value: the JSON its text holds, else its
        structured content, else the text.

        Raises:
            UpstreamToolError: the tool reported an error (``isError``).
            UpstreamError: as :meth:`call`.
        """
        result = self.call(name, arguments)
        text = "".join(c.text for c in result.content if isinstance(c, TextContent))
        if result.is_error:
            raise UpstreamToolError(f"{name}: {text or 'the upstream tool reported an error'}")
        try:
            return json.loads(text)
        except ValueError:
            pass
        return result.structured_content if result.structured_content is not None else text


async def _within(timeout_s: float, call: Any) -> Any:
    with _bounded(timeout_s):
        return await call()


@contextlib.contextmanager
def _bounded(timeout_s: float) -> Any:
    import anyio

    with anyio.fail_after(timeout_s):
        yield


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
