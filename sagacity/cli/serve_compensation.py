"""``sagacity serve compensation``: the compensation service."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sagacity.cli._options import (
    bootstrap_servers_option,
    database_url_option,
    group_option,
    host_option,
    port_option,
    service_options,
    topic_option,
)
from sagacity.config._defaults import DEFAULT_COMPENSATION_GROUP

if TYPE_CHECKING:
    from sagacity.consumers.compensation import CompensationSettings


@click.command()
@click.option(
    "--tools",
    "tools",
    multiple=True,
    envvar="SAGACITY_COMPENSATION_TOOLS",
    metavar="package.module:attr",
    help="Tools (and their compensations) to compensate with; repeat for several (required "
    "unless --mcp-upstream/--mcp-upstream-url gives them).",
)
@click.option(
    "--mcp-upstream",
    default=None,
    envvar="SAGACITY_COMPENSATION_MCP_UPSTREAM",
    metavar='"CMD ARGS"',
    help="Undo through this MCP server (stdio command), its tools declared by --policy, as "
    "`sagacity mcp proxy` fronts it.",
)
@click.option(
    "--mcp-upstream-url",
    default=None,
    envvar="SAGACITY_COMPENSATION_MCP_UPSTREAM_URL",
    help="Undo through this MCP server (streamable HTTP endpoint).",
)
@click.option(
    "--mcp-upstream-header",
    "mcp_upstream_headers",
    multiple=True,
    metavar="'Name: value'",
    help="An HTTP header for --mcp-upstream-url (repeatable).",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    envvar="SAGACITY_COMPENSATION_POLICY",
    help="The tool policy (TOML) of the MCP upstream's tools.",
)
@bootstrap_servers_option("COMPENSATION")
@database_url_option("COMPENSATION", help="libpq URL or conninfo of the claims database.")
@topic_option("COMPENSATION")
@group_option("COMPENSATION", default=DEFAULT_COMPENSATION_GROUP)
@click.option(
    "--instance-id",
    envvar="SAGACITY_COMPENSATION_INSTANCE_ID",
    default=None,
    help="Stable id of this replica (static group membership).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    envvar="SAGACITY_COMPENSATION_TIMEOUT_S",
    default=30.0,
    show_default=True,
    help="Seconds one compensation may run before it is journaled COMPENSATION_FAILED.",
)
@click.option(
    "--concurrency",
    type=int,
    envvar="SAGACITY_COMPENSATION_CONCURRENCY",
    default=4,
    show_default=True,
    help="Sagas compensated at once.",
)
@click.option(
    "--handoff-grace",
    type=float,
    envvar="SAGACITY_COMPENSATION_HANDOFF_GRACE_S",
    default=5.0,
    show_default=True,
    help="Seconds to wait for the requesting run's SAGA_ENDED.",
)
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(min=1000),
    envvar="SAGACITY_COMPENSATION_SESSION_TIMEOUT_MS",
    default=10_000,
    show_default=True,
    help="Consumer group session timeout: an instance silent this long loses its partitions"
    " to the others (the broker's group.min/max.session.timeout.ms bound it).",
)
@port_option(
    "COMPENSATION",
    default=None,
    old="HTTP",
    help="Serve /healthz, /readyz and /metrics on this port (0: any free port).",
)
@host_option("COMPENSATION", default="127.0.0.1", old="HTTP")
@click.option("--dlq-topic", envvar="SAGACITY_COMPENSATION_DLQ_TOPIC", default=None)
@service_options("COMPENSATION")
def compensation(
    tools: tuple[str, ...],
    mcp_upstream: str | None,
    mcp_upstream_url: str | None,
    mcp_upstream_headers: tuple[str, ...],
    policy_file: Path | None,
    bootstrap_servers: str,
    database_url: str,
    topic: str,
    group: str,
    instance_id: str | None,
    timeout_s: float,
    concurrency: int,
    handoff_grace: float,
    session_timeout_ms: int,
    port: int | None,
    host: str,
    dlq_topic: str | None,
    log_level: str,
) -> None:
    """Compensate failed, rejected and expired sagas from the journal, exactly once.

    Librdkafka settings come from SAGACITY_KAFKA_<KEY_WITH_UNDERSCORES> variables.
    """
    import os
    import signal

    from sagacity import compose
    from sagacity.consumers import configure_logging as configure
    from sagacity.consumers import import_tools, log_hot_path
    from sagacity.producer import BrokerCheck
    from sagacity.tracing import configure_from_env as configure_tracing

    configure(log_level)
    configure_tracing("sagacity-compensation")  # OTEL_* variables, with the otel extra
    client = compose.client_settings(os.environ)
    # Asked now, answered while the service is built: a dead broker shows within 10 s.
    broker = BrokerCheck({**client, "bootstrap.servers": bootstrap_servers})

    from sagacity.consumers.compensation import CompensationService

    upstream, register = None, None
    if mcp_upstream is not None or mcp_upstream_url is not None:
        if policy_file is None:
            raise click.UsageError("--mcp-upstream needs --policy (the tool policy)")
        upstream, register = _proxied_tools(
            mcp_upstream, mcp_upstream_url, mcp_upstream_headers, timeout_s, policy_file
        )
    elif not tools:
        raise click.UsageError("give the tools with --tools (or --mcp-upstream and --policy)")
    settings = _settings(
        bootstrap_servers=bootstrap_servers,
        database_url=database_url,
        tools=tools,
        topic=topic,
        group_id=group,
        instance_id=instance_id,
        compensation_timeout_s=timeout_s,
        concurrency=concurrency,
        handoff_grace_s=handoff_grace,
        session_timeout_ms=session_timeout_ms,
        http_host=host,
        http_port=port,
        dlq_topic=dlq_topic,
        client=client,
    )
    import_tools(tools)  # a target that cannot be imported stops it before anything connects
    # Sealed sagas are opened through the key service (docs/adr/0019-erasure.md §3): no KEK,
    # or a bad one, stops the start-up; the composition root hands the service its stores.
    with compose.starting_keys({"SAGACITY_DATABASE_URL": database_url, **os.environ}) as keys:
        handed = compose.compensation_of(settings, keys=keys)  # its claims, index and keys
        service = CompensationService(settings, register=register, dependencies=handed)
        broker.result()

    def stop(signum: int, _frame: object) -> None:
        del signum
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        log_hot_path()
        service.run()
    finally:
        if upstream is not None:
            upstream.close()
        if keys is not None:
            keys.close()


def _proxied_tools(
    command: str | None,
    url: str | None,
    headers: tuple[str, ...],
    timeout_s: float,
    policy_file: Path,
) -> tuple[Any, Callable[[Any], None]]:
    """The upstream MCP server's connection, and what registers its tools (declared by the
    tool policy) on each ``Sagacity`` the service makes."""
    from sagacity.cli.mcp import connect_upstream

    upstream, proxied = connect_upstream(
        upstream_command=command,
        upstream_url=url,
        upstream_headers=headers,
        upstream_timeout_s=timeout_s,
        policy_file=policy_file,
    )

    def register(sagacity: Any) -> None:
        from sagacity.adapters.mcp import register as register_proxied

        register_proxied(sagacity, proxied)

    return upstream, register


def _settings(*, database_url: str, **options: Any) -> CompensationSettings:
    """The service's settings from the options, and from the environment the read index,
    the pinned approvals key and the writer key.

    Raises:
        ConfigurationError: a setting is invalid.
    """
    import os

    from pydantic import ValidationError

    from sagacity._env import read_index_settings_from_env
    from sagacity.consumers.compensation import CompensationSettings
    from sagacity.errors import ConfigurationError

    try:
        return CompensationSettings(
            database_url=database_url,
            **options,
            read_index=read_index_settings_from_env(os.environ, database_url=database_url),
            approvals_public_key=os.environ.get("SAGACITY_APPROVALS_PUBLIC_KEY") or None,
            writer_key=os.environ.get("SAGACITY_COMPENSATION_WRITER_KEY")
            or os.environ.get("SAGACITY_WRITER_KEY")
            or None,
        )
    except ValidationError as exc:
        raise ConfigurationError(f"invalid settings: {exc}") from exc
