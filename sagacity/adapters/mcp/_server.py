"""Sagacity's wrapped tools as an MCP server, journaled, gated and compensated.

Each registered tool becomes an MCP tool: its input schema from its signature, its annotations
from its reversibility.  A call runs inside the session's saga (:mod:`._sessions`); a gated
call returns the seed's ``[AWAITING_APPROVAL]`` text with what a client needs to follow it up;
a failing call returns ``isError`` after its saga is compensated; a call whose ``_meta`` names
an approved request resumes it, if and only if the arguments are the approved bytes and the
caller is the principal that made the request.  Each caller lists and calls its own tools
(:mod:`._callers`) and joins only the sagas it opened (:mod:`._sessions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from sagacity.adapters.mcp._callers import (
    Authenticate,
    Caller,
    CallerSource,
    ToolScope,
    caller_of,
    from_headers,
    from_token,
    refuse_tool,
)
from sagacity.adapters.mcp._http import BearerAuth
from sagacity.adapters.mcp._proxy import ProxiedTool
from sagacity.adapters.mcp._sessions import SessionSagas
from sagacity.adapters.mcp._undo import UNDO_DESCRIPTION, UNDO_TOOL
from sagacity.adapters.mcp._undo import undo_saga as undo
from sagacity.chain import payload_sha256
from sagacity.entries import _attributes as attr
from sagacity.errors import (
    ApprovalError,
    ConfigurationError,
    InvalidArgumentError,
    SagacityError,
    SagaExistsError,
    SerializationError,
)
from sagacity.gate._requester import caller_of as request_caller
from sagacity.gate._requester import request_entry
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.saga._saga import Sagacity, check_saga_id
from sagacity.saga._scope import calling_as
from sagacity.tools._codec import call_arguments, describe_error, encode_payload, encode_result
from sagacity.tools._registry import RegisteredTool
from sagacity.tools._reversibility import Reversibility
from sagacity.tools._tool import awaiting_message

SAGA_META = "sagacity/saga_id"
"""``_meta`` key: the saga a call joins (or, with :data:`SEQ_META`, resumes)."""
SEQ_META = "sagacity/seq"
"""``_meta`` key: the seq of the approved request a call resumes."""
REVERSIBILITY_META = "sagacity/reversibility"
"""Tool ``_meta`` key: the tool's declared reversibility."""

# JSON-RPC error codes of the refusals a client can act on (the server-defined range).
APPROVAL_REFUSED = -32001
"""A resume was refused: not approved, payload changed, expired, already decided."""
SAGA_REFUSED = -32002
"""The named saga cannot be joined: another writer's, or already ended."""

log = logging.getLogger("sagacity.mcp")


def annotations_for(reversibility: Reversibility) -> ToolAnnotations:
    """MCP's hints for a reversibility: READ is read-only; IRREVERSIBLE and PRIVILEGED are
    destructive; a reversible or compensatable write is neither."""
    if reversibility is Reversibility.READ:
        return ToolAnnotations(read_only_hint=True, destructive_hint=False)
    return ToolAnnotations(read_only_hint=False, destructive_hint=reversibility.gated)


class _RawTool(Tool):
    """A tool served with a schema of its own (a proxied upstream tool's): the arguments
    reach the handler as sent, and the upstream validates them."""

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        return await self.fn(arguments, context)


def _no_arguments() -> None:
    """The argument model of a raw tool (never validated against)."""


def _ran(value: object, saga_id: str) -> CallToolResult:
    """The result of a call that ran: its value as text; the saga in ``_meta``."""
    text = value if isinstance(value, str) else encode_result(value)[0]
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "_meta": {SAGA_META: saga_id}}
    )


class SagacityMCP:
    """An MCP server for the tools registered on ``sagacity``.

    Args:
        sagacity: the wrapped tools (``sagacity.wrap(...)`` first) and the journal.
        name: the server's name in the MCP handshake.
        approvals_url: the approvals service's base URL as this server reaches it: a gated
            call's ``approval_api_url`` (its request in the API) and, without
            ``approvals_public_url``, the base of its ``approval_url``.
        approvals_public_url: the approvals service's address as people reach it (its
            ``--public-url``): a gated call's ``approval_url`` is the console's page for the
            request there, ``/ui/requests/{saga_id}/{seq}``.
        idle_timeout_s: a session's saga with no call for this long is ended.
        saga_prefix: the prefix of the saga ids generated for sessions.
        proxied: tools of an upstream MCP server (already registered on ``sagacity``), served
            with the upstream's schema and description; their arguments are journaled with
            sorted keys.

    Raises:
        ConfigurationError: no tool is registered, or a tool's signature cannot be served.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        name: str = "sagacity",
        approvals_url: str | None = None,
        approvals_public_url: str | None = None,
        idle_timeout_s: float = 300.0,
        saga_prefix: str = "mcp-",
        proxied: Sequence[ProxiedTool] = (),
    ) -> None:
        if idle_timeout_s <= 0:
            raise ConfigurationError("idle_timeout_s must be positive")
        tools = list(sagacity.registry)
        if not tools:
            raise ConfigurationError(
                "no tools to serve: wrap them first (sagacity.wrap(obj)), or pass --tools"
            )
        self._sagacity = sagacity
        self._approvals_url = approvals_url.rstrip("/") if approvals_url else None
        public = approvals_public_url or approvals_url
        self._console_url = public.rstrip("/") if public else None
        self.sessions = SessionSagas(
            sagacity, idle_timeout_s=idle_timeout_s, saga_prefix=saga_prefix
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._callers: CallerSource | None = None
        upstream = {p.name: p for p in proxied}
        self.server: MCPServer[Any] = MCPServer(
            name,
            tools=[
                *(
                    self._raw_tool(t, upstream[t.name]) if t.name in upstream else self._tool(t)
                    for t in sorted(tools, key=lambda t: t.name)
                ),
                self._undo_tool(),
            ],
        )
        self.server.middleware.append(ToolScope(lambda: self._callers))

    @property
    def sagacity(self) -> Sagacity:
        """The tools' ``Sagacity``: its journal and registry."""
        return self._sagacity

    def _undo_tool(self) -> Tool:
        """``undo_saga`` (:mod:`._undo`): served beside the wrapped tools, scoped like them."""
        if UNDO_TOOL in self._sagacity.registry:
            raise ConfigurationError(f"a wrapped tool is named {UNDO_TOOL!r}: rename it")

        async def undo_saga(saga_id: str, reason: str, ctx: Context) -> CallToolResult:
            caller = caller_of(self._callers, ctx.request_context.request)
            refuse_tool(caller, UNDO_TOOL)
            principal = caller.name if caller is not None else None
            return await undo(self, check_saga_id(saga_id), reason, principal)

        return Tool.from_function(
            undo_saga,
            name=UNDO_TOOL,
            description=UNDO_DESCRIPTION,
            context_kwarg="ctx",
            annotations=annotations_for(Reversibility.IRREVERSIBLE),
            structured_output=False,
        )

    def set_caller_source(self, source: CallerSource | None) -> None:
        """How to find a call's agent principal (journaled as ``caller``; its tools served):
        ``None`` serves every tool to whoever started the server (stdio without principals)."""
        self._callers = source

    # -- tools ----------------------------------------------------------------------------
    def _tool(self, registered: RegisteredTool) -> Tool:
        try:
            signature = inspect.signature(registered.function, eval_str=True)
        except (NameError, TypeError, ValueError):
            try:
                signature = registered.signature
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(
                    f"tool {registered.name!r} has no signature to serve: {exc}"
                ) from exc

        async def handler(**kwargs: Any) -> CallToolResult:
            ctx: Context = kwargs.pop("ctx")
            return await self._call(registered, kwargs, ctx)

        handler.__signature__ = signature.replace(  # type: ignore[attr-defined]
            return_annotation=inspect.Signature.empty
        )
        handler.__name__ = registered.name
        try:
            return Tool.from_function(
                handler,
                name=registered.name,
                description=inspect.getdoc(registered.function) or registered.name,
                context_kwarg="ctx",
                annotations=annotations_for(registered.reversibility),
                meta={REVERSIBILITY_META: registered.reversibility.value},
                structured_output=False,
            )
        except Exception as exc:
            raise ConfigurationError(
                f"tool {registered.name!r} cannot be served over MCP: {exc}"
            ) from exc

    def _raw_tool(self, registered: RegisteredTool, proxied: ProxiedTool) -> Tool:
        async def handler(arguments: dict[str, Any], ctx: Context) -> CallToolResult:
            return await self._call(registered, dict(sorted(arguments.items())), ctx)

        return _RawTool(
            fn=handler,
            name=registered.name,
            title=proxied.title,
            description=proxied.description,
            parameters=dict(proxied.input_schema),
            fn_metadata=func_metadata(_no_arguments, structured_output=False),
            is_async=True,
            context_kwarg=None,
            annotations=annotations_for(registered.reversibility),
            meta={REVERSIBILITY_META: registered.reversibility.value},
        )

    # -- calls ----------------------------------------------------------------------------
    async def _call(
        self, registered: RegisteredTool, arguments: dict[str, Any], ctx: Context
    ) -> CallToolResult:
        meta: Mapping[str, Any] = ctx.request_context.meta or {}
        caller: Caller | None = caller_of(self._callers, ctx.request_context.request)
        refuse_tool(caller, registered.name)  # ToolScope refused it already; kept in one rule
        principal = caller.name if caller is not None else None
        saga_id = self._saga_meta(meta)
        seq = meta.get(SEQ_META)
        if seq is not None:
            if saga_id is None:
                raise MCPError(APPROVAL_REFUSED, f"{SEQ_META} needs {SAGA_META}")
            return await self._resume(registered, arguments, saga_id, seq, principal)
        self._start_sweeper()
        with calling_as(principal):
            return await self._in_saga(registered, arguments, ctx, saga_id, principal)

    @staticmethod
    def _saga_meta(meta: Mapping[str, Any]) -> str | None:
        saga_id = meta.get(SAGA_META)
        if saga_id is None:
            return None
        try:
            return check_saga_id(saga_id)
        except InvalidArgumentError as exc:
            raise MCPError(SAGA_REFUSED, f"{SAGA_META}: {exc.message}") from exc

    async def _in_saga(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        ctx: Context,
        saga_id: str | None,
        principal: str | None,
    ) -> CallToolResult:
        session = _connection_of(ctx)
        try:
            return await self._held(registered, arguments, session, saga_id, principal)
        except SagaExistsError as exc:
            raise MCPError(SAGA_REFUSED, exc.message) from exc

    async def _held(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        session: object,
        saga_id: str | None,
        principal: str | None,
    ) -> CallToolResult:
        holding = self.sessions.hold(session=session, saga_id=saga_id, owner=principal)
        async with holding as slot:
            run = await self.sessions.ensure_run(slot, saga_id)
            self._end_with(session, slot)
            error: Exception | None = None
            value: Any = None
            try:
                with run.joined():
                    value = await self._invoke(registered, arguments)
            except Exception as exc:
                error = exc
            if run.failure is not None or run.lost is not None or error is not None:
                result = await self._end(slot)
                raise ToolError(self._failure_text(registered, error, result))
            gates = run.gates
            if gates:
                gate = gates[-1]
                await self._end(slot)
                digest = (
                    await asyncio.to_thread(self._journaled_sha256, run.saga_id, gate.seq)
                    if registered.definition.redact
                    else None
                )
                return self._awaiting(registered, run.saga_id, gate.seq, arguments, digest)
            return _ran(value, run.saga_id)

    async def _invoke(self, registered: RegisteredTool, arguments: dict[str, Any]) -> Any:
        if registered.definition.is_async:
            return await registered.wrapped(**arguments)
        # A sync tool (and its journal appends, which wait for the broker) runs on a worker
        # thread; the thread gets a copy of this context, the saga included.
        return await asyncio.to_thread(registered.wrapped, **arguments)

    async def _end(self, slot: Any) -> SagaResult | None:
        run = slot.run
        try:
            await self.sessions.end(slot)
        except SagacityError:
            log.exception("could not end saga %s", run.saga_id if run else "?")
            return None
        return run.end() if run is not None else None

    @staticmethod
    def _failure_text(
        registered: RegisteredTool, error: Exception | None, result: SagaResult | None
    ) -> str:
        cause = describe_error(error) if error is not None else "the call failed"
        if result is None:
            return f"{cause}; the saga could not be ended (see the server log)"
        return f"{cause}. {result.summary()}"

    def _journaled_sha256(self, saga_id: str, seq: int) -> str | None:
        """The ``payload_sha256`` the request at ``seq`` journaled: for a tool with redacted
        fields it is over the redacted payload (docs/adr/0019-erasure.md §5), which only the
        journal holds."""
        entries = self._sagacity.journal.entries(saga_id)
        entry = next((e for e in entries if e.seq == seq), None)
        return entry.attributes.get(attr.PAYLOAD_SHA256) if entry is not None else None

    def _awaiting(
        self,
        registered: RegisteredTool,
        saga_id: str,
        seq: int,
        arguments: dict[str, Any],
        journaled_sha256: str | None = None,
    ) -> CallToolResult:
        digest = journaled_sha256
        if digest is None:
            digest = payload_sha256(self._payload(registered, arguments))
        structured: dict[str, Any] = {
            "saga_id": saga_id,
            "seq": seq,
            "payload_sha256": digest,
            # For a person: the console's page for the request (sign-in, then the request).
            "approval_url": (
                f"{self._console_url}/ui/requests/{saga_id}/{seq}" if self._console_url else None
            ),
            # For a program holding a token: the request in the approvals API.
            "approval_api_url": (
                f"{self._approvals_url}/sagacity/approvals/{saga_id}/{seq}"
                if self._approvals_url
                else None
            ),
        }
        return CallToolResult(
            content=[TextContent(type="text", text=awaiting_message(registered.name))],
            structured_content=structured,
        )

    @staticmethod
    def _payload(registered: RegisteredTool, arguments: dict[str, Any]) -> str:
        return encode_payload(registered.name, call_arguments(registered.signature, (), arguments))

    # -- resume ---------------------------------------------------------------------------
    async def _resume(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        saga_id: str,
        seq: object,
        principal: str | None,
    ) -> CallToolResult:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise MCPError(APPROVAL_REFUSED, f"{SEQ_META} must be a positive integer")
        # Before anything is journaled: a refused resume of someone else's request must not
        # end (and compensate) their saga.
        await asyncio.to_thread(self._refuse_foreign, saga_id, seq, principal)
        try:
            payload = self._payload(registered, arguments)
        except (SerializationError, TypeError) as exc:
            raise MCPError(APPROVAL_REFUSED, f"the arguments cannot be journaled: {exc}") from exc
        pending = [
            r
            for r in self._sagacity.pending_approvals(saga_id)
            if r.seq == seq and r.tool != registered.name
        ]
        if pending:
            raise MCPError(
                APPROVAL_REFUSED,
                f"the request at seq {seq} of saga {saga_id!r} is for tool {pending[0].tool!r}",
            )
        try:
            result = await self._sagacity.resume_saga_async(
                saga_id, seq, payload, requested_by=principal
            )
        except ApprovalError as exc:
            raise MCPError(APPROVAL_REFUSED, str(exc)) from exc
        except SagacityError as exc:
            raise MCPError(APPROVAL_REFUSED, str(exc)) from exc
        if result.status in (SagaStatus.COMPLETED, SagaStatus.AWAITING_APPROVAL):
            return _ran(result.value, saga_id)
        raise ToolError(f"{registered.name}: {result.summary()}")

    def _refuse_foreign(self, saga_id: str, seq: int, principal: str | None) -> None:
        """Refuse to resume a request another principal made (its ``caller`` on the chain).

        Raises:
            MCPError: :data:`APPROVAL_REFUSED`, nothing journaled.
        """
        try:
            entries = self._sagacity.entries(saga_id)
        except SagacityError as exc:
            raise MCPError(APPROVAL_REFUSED, str(exc)) from exc
        entry = request_entry(entries, seq)
        if entry is None:
            return  # no request there: the core refuses it, journaling nothing
        if request_caller(entry) != principal:
            raise MCPError(
                APPROVAL_REFUSED,
                f"the request at seq {seq} of saga {saga_id!r} was made by another principal: "
                "only the principal that made it resumes it over MCP (an approver of its tool "
                "resumes it in the approvals service)",
            )

    # -- lifecycle ------------------------------------------------------------------------
    def _end_with(self, session: object, slot: Any) -> None:
        """End the slot's saga when its connection closes (where the SDK says so)."""
        stack = getattr(session, "exit_stack", None)
        marker = getattr(slot, "hooked", False)
        if stack is None or marker:
            return
        slot.hooked = True

        async def on_close() -> None:
            async with slot.lock:
                if slot.run is not None:
                    await self._end(slot)

        stack.push_async_callback(on_close)

    def _start_sweeper(self) -> None:
        if self._sweeper is not None and not self._sweeper.done():
            return
        interval = max(0.05, min(5.0, self.sessions.idle_timeout_s / 4))

        async def sweep() -> None:
            while True:
                await asyncio.sleep(interval)
                for saga_id in await self.sessions.sweep():
                    log.info("saga %s ended: idle or its session closed", saga_id)

        self._sweeper = asyncio.get_running_loop().create_task(sweep())

    async def aclose(self) -> None:
        """End every open saga and stop the idle sweep (the server is stopping)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.sessions.close()

    def http_app(self, authenticate: Authenticate, *, path: str = "/mcp") -> Any:
        """The streamable HTTP transport as an ASGI app, behind bearer-token authentication.

        Each call's principal (the token's holder, an agent) is journaled as its ``caller``
        and served its own tools; open sagas are ended when the app shuts down.
        """
        self.set_caller_source(from_headers(authenticate))
        app = self.server.streamable_http_app(streamable_http_path=path)
        inner = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(a: Any) -> AsyncIterator[None]:
            async with inner(a):
                try:
                    yield
                finally:
                    await self.aclose()

        app.router.lifespan_context = lifespan
        return BearerAuth(app, authenticate)

    def run_stdio(self, authenticate: Authenticate | None = None, token: str | None = None) -> None:
        """Serve over stdio until the client closes the stream; open sagas are then ended.

        With ``authenticate`` and ``token`` every call is the token's agent's (looked up again
        on each call); without them, whoever started the process calls every tool.
        """
        import anyio

        if (authenticate is None) != (token is None):
            raise ConfigurationError("give both the principals and the agent's token, or neither")
        if authenticate is not None and token is not None:
            self.set_caller_source(from_token(authenticate, token))

        async def main() -> None:
            try:
                await self.server.run_stdio_async()
            finally:
                await self.aclose()

        anyio.run(main)


def _connection_of(ctx: Context) -> object:
    """The object standing for the call's connection (its MCP session).

    The SDK keeps one ``Connection`` per client connection (with an exit stack unwound when it
    closes); requests carry a per-request session object pointing at it.
    """
    session = ctx.request_context.session
    connection = getattr(session, "_connection", None)
    return connection if connection is not None else session
