"""``sagacity serve mcp``: wrapped tools as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from sagacity.cli._options import DEFAULT_TOPIC, service_envvars


@click.command()
@click.option(
    "--tools",
    "tools",
    multiple=True,
    required=True,
    envvar="SAGACITY_MCP_TOOLS",
    metavar="package.module:attr",
    help="Tools to serve (an object with @compensable methods, a function, or a class "
    "instantiated without arguments); repeatable. [env: SAGACITY_MCP_TOOLS]",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    envvar="SAGACITY_MCP_TRANSPORT",
    help="stdio for a host that starts the server; http (streamable HTTP) for remote clients.",
)
@click.option("--host", default="127.0.0.1", show_default=True, envvar="SAGACITY_MCP_HOST")
@click.option("--port", type=int, default=8086, show_default=True, envvar="SAGACITY_MCP_PORT")
@click.option(
    "--auth",
    "auth_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SAGACITY_MCP_AUTH",
    default=None,
    help="Principals file of the approvals service (bearer tokens); required for http.",
)
@click.option(
    "--bootstrap-servers",
    envvar=service_envvars("MCP", "BOOTSTRAP_SERVERS"),
    required=True,
    help="Kafka bootstrap servers. [env: SAGACITY_MCP_BOOTSTRAP_SERVERS, "
    "SAGACITY_BOOTSTRAP_SERVERS]",
)
@click.option(
    "--topic",
    envvar=service_envvars("MCP", "TOPIC"),
    default=DEFAULT_TOPIC,
    show_default=True,
    help="Journal topic. [env: SAGACITY_MCP_TOPIC, SAGACITY_TOPIC]",
)
@click.option(
    "--approvals-url",
    envvar="SAGACITY_APPROVALS_URL",
    default=None,
    help="The approvals service, for the approval_url of gated calls. "
    "[env: SAGACITY_APPROVALS_URL]",
)
@click.option(
    "--idle-timeout",
    "idle_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    envvar="SAGACITY_MCP_IDLE_TIMEOUT_S",
    help="Seconds a session's saga may go without a call before it is ended.",
)
@click.option(
    "--compensation",
    type=click.Choice(["delegated", "inline"]),
    default="delegated",
    show_default=True,
    envvar="SAGACITY_MCP_COMPENSATION",
    help="delegated: the compensation service undoes failed sagas; inline: this process.",
)
@click.option("--log-level", default="INFO", show_default=True, envvar="SAGACITY_MCP_LOG_LEVEL")
def mcp(
    tools: tuple[str, ...],
    transport: str,
    host: str,
    port: int,
    auth_file: Path | None,
    bootstrap_servers: str,
    topic: str,
    approvals_url: str | None,
    idle_timeout_s: float,
    compensation: str,
    log_level: str,
) -> None:
    """Serve wrapped tools over MCP: each call journaled, gated calls held for approval.

    A session's calls share one saga (or the saga the client names in _meta
    "sagacity/saga_id"); a gated call is resumed by calling the tool again with the same
    arguments and _meta "sagacity/saga_id" and "sagacity/seq". See docs/mcp.md.
    """
    # stdout is the protocol channel under stdio: every log line goes to stderr.
    logging.basicConfig(
        stream=sys.stderr,
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if transport == "http" and auth_file is None:
        raise click.UsageError("--transport http needs --auth (the principals file)")
    try:
        from sagacity.adapters.mcp import SagacityMCP
    except ImportError as exc:
        raise click.ClickException(
            f"sagacity serve mcp needs the mcp extra: pip install 'sagacity[mcp]' ({exc})"
        ) from exc
    from sagacity import Sagacity
    from sagacity.consumers.approvals._server import load_tools
    from sagacity.errors import SagacityError
    from sagacity.producer import journal_from_env

    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    environ = {
        **os.environ,
        "SAGACITY_BOOTSTRAP_SERVERS": bootstrap_servers,
        "SAGACITY_TOPIC": topic,
    }
    try:
        sagacity = Sagacity(
            journal_from_env(environ),
            compensation="inline" if compensation == "inline" else "delegated",
        )
        for obj in load_tools(tools):
            sagacity.wrap(obj)
        server = SagacityMCP(sagacity, approvals_url=approvals_url, idle_timeout_s=idle_timeout_s)
        authenticate = None
        if auth_file is not None:
            from sagacity.consumers.approvals._auth import AuthFile

            auth = AuthFile(auth_file)

            def authenticate(token: str) -> str | None:
                principal = auth.authenticate(token)
                return principal.name if principal is not None else None

    except SagacityError as exc:
        raise click.ClickException(exc.message) from exc
    if transport == "stdio":
        server.run_stdio()
        return
    import uvicorn

    assert authenticate is not None
    uvicorn.run(
        server.http_app(authenticate),
        host=host,
        port=port,
        log_level=log_level.lower(),
        server_header=False,
    )
