"""``sagacity serve mcp``: wrapped tools as an MCP server (stdio or streamable HTTP).

The options shared with ``sagacity mcp proxy`` (transport, auth, Kafka, saga scope) are
:func:`serving_options`, and both end in :func:`serve`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sagacity.cli._exit import CommandError
from sagacity.cli._options import allow_clear_data_option, service_envvars
from sagacity.config._defaults import DEFAULT_TOPIC

if TYPE_CHECKING:
    from sagacity import Sagacity
    from sagacity.adapters.mcp import ProxiedTool
    from sagacity.consumers.approvals._auth import AuthFile

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class Serving:
    """How an MCP server is served (the options both MCP commands take)."""

    transport: str
    host: str
    port: int
    auth_file: Path | None
    token_file: Path | None
    bootstrap_servers: str
    topic: str
    approvals_url: str | None
    approvals_public_url: str | None
    idle_timeout_s: float
    compensation: str
    log_level: str


def serving_options(fn: F) -> F:
    """The transport, authentication, Kafka and saga-scope options of an MCP server."""
    options = [
        click.option(
            "--transport",
            type=click.Choice(["stdio", "http"]),
            default="stdio",
            show_default=True,
            envvar="SAGACITY_MCP_TRANSPORT",
            help="stdio for a host that starts the server; http (streamable HTTP at /mcp) for "
            "remote clients.",
        ),
        click.option(
            "--host",
            default="127.0.0.1",
            show_default=True,
            envvar="SAGACITY_MCP_HOST",
            help="Listen address of --transport http.",
        ),
        click.option(
            "--port",
            type=int,
            default=8086,
            show_default=True,
            envvar="SAGACITY_MCP_PORT",
            help="Port of --transport http (the endpoint is /mcp).",
        ),
        click.option(
            "--auth",
            "auth_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            envvar="SAGACITY_MCP_AUTH",
            default=None,
            help='The principals file: its agents (role = "agent") are the callers, each '
            "served its own tools; required for http.",
        ),
        click.option(
            "--token-file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            envvar="SAGACITY_MCP_TOKEN_FILE",
            default=None,
            help="stdio with --auth: the file holding the token of the agent this server acts for.",
        ),
        click.option(
            "--bootstrap-servers",
            envvar=service_envvars("MCP", "BOOTSTRAP_SERVERS"),
            required=True,
            help="Kafka bootstrap servers.",
        ),
        click.option(
            "--topic",
            envvar=service_envvars("MCP", "TOPIC"),
            default=DEFAULT_TOPIC,
            show_default=True,
            help="Journal topic.",
        ),
        click.option(
            "--approvals-url",
            envvar="SAGACITY_APPROVALS_URL",
            default=None,
            help="The approvals service as this server reaches it: a gated call's "
            "approval_api_url.",
        ),
        click.option(
            "--idle-timeout",
            "idle_timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=300.0,
            show_default=True,
            envvar="SAGACITY_MCP_IDLE_TIMEOUT_S",
            help="Seconds a session's saga may go without a call before it is ended.",
        ),
        click.option(
            "--compensation",
            type=click.Choice(["delegated", "inline"]),
            default="delegated",
            show_default=True,
            envvar="SAGACITY_MCP_COMPENSATION",
            help="delegated: the compensation service undoes failed sagas; inline: this process.",
        ),
        click.option(
            "--log-level",
            default="INFO",
            show_default=True,
            envvar="SAGACITY_MCP_LOG_LEVEL",
            help="Log records at this level and above, as JSON lines on stderr.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return _approvals_public_url(allow_clear_data_option(fn))


def _approvals_public_url(fn: F) -> F:
    """``--approvals-public-url``: where a gated call's ``approval_url`` points people."""
    return click.option(
        "--approvals-public-url",
        envvar="SAGACITY_APPROVALS_PUBLIC_URL",
        default=None,
        help="The approvals service as people reach it (its --public-url): a gated call's "
        "approval_url is the console's page for the request there [default: --approvals-url].",
    )(fn)


def serving(**options: Any) -> Serving:
    """The :class:`Serving` of a command's options; logging in the services' one format on
    stderr (stdout is the protocol under stdio).

    Raises:
        click.UsageError: http without a principals file; a token file without one, or over
            http; a principals file under stdio without the agent's token.
    """
    from sagacity.consumers import configure_logging as configure

    serving = Serving(**options)
    configure(serving.log_level)
    if serving.transport == "http":
        if serving.auth_file is None:
            raise click.UsageError("--transport http needs --auth (the principals file)")
        if serving.token_file is not None:
            raise click.UsageError(
                "--token-file is for stdio: over http each request carries its own bearer token"
            )
    elif (serving.auth_file is None) != (serving.token_file is None):
        raise click.UsageError(
            "under stdio give --auth and --token-file together (the principals file and the "
            "token of the agent this server acts for), or neither"
        )
    return serving


def mcp_adapter() -> Any:
    """``sagacity.adapters.mcp``; without the SDK, the root command says which extra to
    install in one line, exit 2, as every command does (:mod:`sagacity.cli._extras`)."""
    from sagacity.adapters import mcp as adapter

    return adapter


def sagacity_for(serving: Serving) -> Sagacity:
    """A ``Sagacity`` on the Kafka journal the options name."""
    from sagacity import Sagacity
    from sagacity._env import journal_from_env
    from sagacity.signing._decision_signature import verifier_from_env
    from sagacity.signing._operator_signature import verifier_from_env as operator_verifier_from_env

    environ = {
        **os.environ,
        "SAGACITY_BOOTSTRAP_SERVERS": serving.bootstrap_servers,
        "SAGACITY_TOPIC": serving.topic,
    }
    return Sagacity(
        journal_from_env(environ),
        compensation="inline" if serving.compensation == "inline" else "delegated",
        # A resume counts only approvals the approvals service signed (docs/adr/0014).
        approvals_public_key=verifier_from_env(environ),
        # ... and a deadline as extended by a verified operator extension (routing.md).
        operator_public_key=operator_verifier_from_env(environ),
    )


def serve(
    serving: Serving, sagacity: Sagacity, *, proxied: list[ProxiedTool] | None = None
) -> None:
    """Serve ``sagacity``'s tools as the options say, until stopped."""
    from sagacity.consumers import log_hot_path
    from sagacity.errors import SagacityError

    adapter = mcp_adapter()
    try:
        server = adapter.SagacityMCP(
            sagacity,
            approvals_url=serving.approvals_url,
            approvals_public_url=serving.approvals_public_url,
            idle_timeout_s=serving.idle_timeout_s,
            proxied=proxied or (),
        )
        auth = _agents(serving.auth_file) if serving.auth_file is not None else None
        token = _agent_token(auth, serving.token_file) if serving.token_file is not None else None
        if auth is not None:
            # A resume here counts approvals by the file's M-of-N rules too (routing.md).
            from sagacity.consumers.approvals import LiveRouting

            held = auth
            sagacity.approver_groups = LiveRouting(lambda: held.current().routing)
    except SagacityError as exc:
        raise CommandError.of(exc) from exc
    log_hot_path()
    if serving.transport == "stdio":
        server.run_stdio(auth.agent if auth is not None else None, token)
        return
    import uvicorn

    assert auth is not None
    uvicorn.run(
        server.http_app(auth.agent),
        host=serving.host,
        port=serving.port,
        log_level=serving.log_level.lower(),
        server_header=False,
    )


def _agents(path: Path) -> AuthFile:
    """The principals file, which must list an agent (the only principals served).

    Raises:
        ConfigurationError: it does not load, or lists no agent.
    """
    from sagacity.consumers.approvals._auth import AuthFile, Role
    from sagacity.errors import ConfigurationError

    auth = AuthFile(path)
    if not any(p.role is Role.AGENT for p in auth.current().principals()):
        raise ConfigurationError(
            f'{path} lists no agent (role = "agent"): the MCP server serves agent principals '
            "only, and an entry without a role is an approver; add one with "
            "sagacity approvals token-hash --role agent"
        )
    return auth


def _agent_token(auth: AuthFile | None, path: Path) -> str:
    """The agent token a stdio server acts for, checked against the principals file.

    Raises:
        ConfigurationError / PermissionDeniedError: unreadable, empty, unknown, or not an agent's.
    """
    from sagacity.errors import ConfigurationError

    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc}") from exc
    if not token:
        raise ConfigurationError(f"the token file {path} is empty")
    assert auth is not None
    if auth.agent(token) is None:
        raise ConfigurationError(f"the token in {path} is not in the principals file")
    return token


@click.command()
@click.option(
    "--tools",
    "tools",
    multiple=True,
    required=True,
    envvar="SAGACITY_MCP_TOOLS",
    metavar="package.module:attr",
    help="Tools to serve (an object with @compensable methods, a function, or a class "
    "instantiated without arguments); repeatable.",
)
@serving_options
def mcp(tools: tuple[str, ...], **options: Any) -> None:
    """Serve wrapped tools over MCP: each call journaled, gated calls held for approval.

    A session's calls share one saga (or the saga the client names in _meta
    "sagacity/saga_id"); a gated call is resumed by calling the tool again with the same
    arguments and _meta "sagacity/saga_id" and "sagacity/seq". See docs/mcp.md.
    """
    from sagacity.consumers import load_tools
    from sagacity.errors import SagacityError

    settings = serving(**options)
    mcp_adapter()
    try:
        sagacity = sagacity_for(settings)
        for obj in load_tools(tools):
            sagacity.wrap(obj)
    except SagacityError as exc:
        raise CommandError.of(exc) from exc
    serve(settings, sagacity)
