"""``sagacity mcp proxy``: any MCP server's tools, journaled, gated and compensated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sagacity.cli._exit import CommandError
from sagacity.cli.serve_mcp import mcp_adapter, sagacity_for, serve, serving, serving_options


@click.group()
def mcp() -> None:
    """Model Context Protocol: put Sagacity in front of an MCP server."""


def upstream_options(fn: Any) -> Any:
    """How to reach the upstream MCP server (shared with the compensation service)."""
    for option in reversed(
        [
            click.option(
                "--upstream",
                "upstream_command",
                default=None,
                envvar="SAGACITY_MCP_UPSTREAM",
                metavar='"CMD ARGS"',
                help="The upstream server's command line (stdio), split like a shell.",
            ),
            click.option(
                "--upstream-url",
                default=None,
                envvar="SAGACITY_MCP_UPSTREAM_URL",
                help="The upstream server's streamable HTTP endpoint.",
            ),
            click.option(
                "--upstream-header",
                "upstream_headers",
                multiple=True,
                metavar="'Name: value'",
                help="An HTTP header for --upstream-url (repeatable).",
            ),
            click.option(
                "--upstream-timeout",
                "upstream_timeout_s",
                type=click.FloatRange(min=0, min_open=True),
                default=30.0,
                show_default=True,
                envvar="SAGACITY_MCP_UPSTREAM_TIMEOUT_S",
                help="Seconds one upstream call may take; longer is journaled FAILED.",
            ),
            click.option(
                "--policy",
                "policy_file",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                required=True,
                envvar="SAGACITY_MCP_POLICY",
                help="The tool policy (TOML): each upstream tool's reversibility and undo.",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def connect_upstream(
    *,
    upstream_command: str | None,
    upstream_url: str | None,
    upstream_headers: tuple[str, ...],
    upstream_timeout_s: float,
    policy_file: Path,
) -> tuple[Any, list[Any]]:
    """Start the upstream and declare its tools by the policy: ``(upstream, tools)``.

    Raises:
        click.UsageError / click.ClickException: the options or the policy do not fit.
    """
    from sagacity.errors import SagacityError
    from sagacity.policy import Policy

    adapter = mcp_adapter()
    if (upstream_command is None) == (upstream_url is None):
        raise click.UsageError("give the upstream with --upstream or --upstream-url (one)")
    headers: dict[str, str] = {}
    for header in upstream_headers:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise click.UsageError(f"--upstream-header {header!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    try:
        policy = Policy.from_toml(policy_file)
        upstream = adapter.Upstream(
            command=upstream_command,
            url=upstream_url,
            headers=headers,
            timeout_s=upstream_timeout_s,
        )
        upstream.start()
        try:
            tools = adapter.proxied_tools(upstream, policy)
        except BaseException:
            upstream.close()
            raise
    except SagacityError as exc:
        raise CommandError.of(exc) from exc
    return upstream, tools


@mcp.command()
@upstream_options
@serving_options
def proxy(
    upstream_command: str | None,
    upstream_url: str | None,
    upstream_headers: tuple[str, ...],
    upstream_timeout_s: float,
    policy_file: Path,
    **options: Any,
) -> None:
    """Front an MCP server: every call journaled, gated by the policy, compensated upstream.

    Each upstream tool is declared by the policy (its annotations as defaults; a tool nothing
    covers is refused at start-up). An undo is the upstream's own returned undo or a Python
    compensation. The compensation service undoes through the same upstream with
    `sagacity serve compensation --mcp-upstream ... --policy ...`. See docs/mcp.md.
    """
    from sagacity.errors import SagacityError

    settings = serving(**options)
    upstream, tools = connect_upstream(
        upstream_command=upstream_command,
        upstream_url=upstream_url,
        upstream_headers=upstream_headers,
        upstream_timeout_s=upstream_timeout_s,
        policy_file=policy_file,
    )
    adapter = mcp_adapter()
    try:
        sagacity = sagacity_for(settings)
        adapter.register(sagacity, tools)
        serve(settings, sagacity, proxied=tools)
    except SagacityError as exc:
        raise CommandError.of(exc) from exc
    finally:
        upstream.close()
