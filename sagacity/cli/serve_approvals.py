"""``sagacity serve approvals``: the approvals service (HTTP API, consumer group, sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sagacity.cli._options import (
    group_option,
    host_option,
    port_option,
    service_envvars,
    service_options,
    topic_option,
)
from sagacity.cli._slack_options import slack_options
from sagacity.config._defaults import DEFAULT_APPROVALS_GROUP


def _env(name: str) -> list[str]:
    return service_envvars("APPROVALS", name)


@click.command()
@click.option(
    "--tools",
    "tools",
    multiple=True,
    envvar=_env("TOOLS"),
    show_envvar=True,
    metavar="package.module:attr",
    help="Tools resume may run (an object with @compensable methods, a function, or a class "
    "instantiated without arguments); repeatable. Imported with the working directory on "
    "the path.",
)
@host_option("APPROVALS", default="127.0.0.1")
@port_option("APPROVALS", default=8085, help="Where the API listens.")
@click.option(
    "--auth",
    "auth_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar=["SAGACITY_APPROVALS_AUTH_FILE"],
    show_envvar=True,
    default=None,
    help="Principals file (TOML or JSON) mapping token hashes to names and tools.",
)
@click.option(
    "--insecure-dev",
    is_flag=True,
    help="DEMO ONLY: take the approver's name from the request body, unauthenticated.",
)
@click.option(
    "--database-url",
    envvar=_env("DATABASE_URL"),
    show_envvar=True,
    default=None,
    help="PostgreSQL for the working table.",
)
@click.option(
    "--bootstrap-servers",
    envvar=_env("BOOTSTRAP_SERVERS"),
    show_envvar=True,
    default=None,
    help="Kafka bootstrap servers.",
)
@topic_option("APPROVALS")
@group_option("APPROVALS", default=DEFAULT_APPROVALS_GROUP)
@click.option(
    "--policy-version",
    envvar=_env("POLICY_VERSION"),
    show_envvar=True,
    default="1",
    show_default=True,
    help="Recorded on every decision.",
)
@click.option(
    "--signing-key",
    type=click.Path(exists=True, dir_okay=False),
    envvar=_env("SIGNING_KEY"),
    show_envvar=True,
    default=None,
    help="Ed25519 key decisions are signed with (`sagacity approvals keygen`); required on Kafka.",
)
@click.option(
    "--approval-ttl",
    "approval_ttl_s",
    type=float,
    envvar=_env("APPROVAL_TTL_S"),
    show_envvar=True,
    default=86400.0,
    show_default=True,
    help="Seconds a request stays approvable (0 disables the service's bound).",
)
@click.option(
    "--sweep-interval",
    "sweep_interval_s",
    type=float,
    envvar=_env("SWEEP_INTERVAL_S"),
    show_envvar=True,
    default=5.0,
    show_default=True,
    help="Seconds between expiry sweeps.",
)
@click.option(
    "--max-body",
    "max_body_bytes",
    type=int,
    envvar=_env("MAX_BODY_BYTES"),
    show_envvar=True,
    default=None,
    help="Larger request bodies get 413 [default: 262144].",
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="URL",
    envvar=_env("NOTIFY"),
    show_envvar=True,
    help="Webhook told of new requests, requests about to expire and sagas that need a "
    "person (repeatable; the variable is space separated).",
)
@click.option(
    "--notify-format",
    type=click.Choice(["json", "slack"]),
    envvar=_env("NOTIFY_FORMAT"),
    show_envvar=True,
    default=None,
    help="The webhook body: plain JSON, or Slack's incoming-webhook text [default: json].",
)
@click.option(
    "--notify-before-expiry",
    "notify_before_expiry_s",
    type=float,
    envvar=_env("NOTIFY_BEFORE_EXPIRY_S"),
    show_envvar=True,
    default=None,
    help="Seconds before a request's deadline its warning is sent [default: 900].",
)
@click.option(
    "--public-url",
    envvar=_env("PUBLIC_URL"),
    show_envvar=True,
    default=None,
    help="The console's address as people reach it, for links [default: http://HOST:PORT].",
)
@service_options("APPROVALS")
@slack_options
def approvals(
    tools: tuple[str, ...],
    host: str,
    port: int,
    auth_file: Path | None,
    insecure_dev: bool,
    database_url: str | None,
    bootstrap_servers: str | None,
    topic: str,
    group: str,
    policy_version: str,
    signing_key: str | None,
    approval_ttl_s: float,
    sweep_interval_s: float,
    max_body_bytes: int | None,
    notify: tuple[str, ...],
    notify_format: str | None,
    notify_before_expiry_s: float | None,
    public_url: str | None,
    slack: dict[str, Any],
    log_level: str,
) -> None:
    """Serve the approvals API and fold AWAITING_APPROVAL events into PostgreSQL.

    Each option also reads the variable its help names (SAGACITY_APPROVALS_X first, then
    SAGACITY_X); see docs/operations/approvals.md.
    """
    import os

    import uvicorn

    from sagacity import compose
    from sagacity.consumers import configure_logging as configure
    from sagacity.consumers import log_hot_path
    from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
    from sagacity.consumers.approvals.slack import slack_config
    from sagacity.producer import check_reachable, startup_timeout
    from sagacity.tracing import configure_from_env as configure_tracing

    configure(log_level)
    configure_tracing("sagacity-approvals")  # OTEL_* variables, with the otel extra
    settings = ApprovalsSettings.from_env(
        tools=tools or None,
        host=host,
        port=port,
        auth_file=str(auth_file) if auth_file else None,
        insecure_dev=insecure_dev or None,
        database_url=database_url,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        group_id=group,
        policy_version=policy_version,
        signing_key=signing_key,
        approval_ttl_s=approval_ttl_s,
        sweep_interval_s=sweep_interval_s,
        max_body_bytes=max_body_bytes,
        notify=notify or None,
        notify_format=notify_format,
        notify_before_expiry_s=notify_before_expiry_s,
        public_url=public_url,
        **slack,
    )
    slack_config(settings)  # a broken Slack setting is named before the journal's are checked
    if where := settings.bootstrap_servers:
        client = compose.client_settings(os.environ)
        check_reachable({**client, "bootstrap.servers": where}, timeout=startup_timeout())
    from sagacity.cli._archive_bundles import approvals_dependencies  # the driver: load late

    server = ApprovalsServer(settings, dependencies=approvals_dependencies(settings))
    log_hot_path()
    web = uvicorn.Server(
        uvicorn.Config(
            server.app,
            host=settings.host,
            port=settings.port,
            log_level=log_level.lower(),
            log_config=None,
            proxy_headers=False,
            server_header=False,
        )
    )
    consumer = server.consumer
    if consumer is not None:
        # Kafka refusing the service's principal (its group's ACL) stops the service.
        consumer.on_refused = lambda: setattr(web, "should_exit", True)
    web.run()
    if consumer is not None and consumer.refused is not None:
        raise consumer.refused
