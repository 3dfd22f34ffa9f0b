"""``sagacity serve approvals``: the approvals service (HTTP API, consumer group, sweep)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from sagacity.errors import SagacityError


@click.command()
@click.option(
    "--tools",
    "tools",
    multiple=True,
    metavar="package.module:attr",
    help="Tools resume may run (an object with @compensable methods, a function, or a class "
    "instantiated without arguments); repeatable. Imported with the working directory on "
    "the path.",
)
@click.option("--host", default=None, help="Listen address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Listen port (default 8085).")
@click.option(
    "--auth",
    "auth_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Principals file (TOML or JSON) mapping token hashes to names and tools.",
)
@click.option(
    "--insecure-dev",
    is_flag=True,
    help="DEMO ONLY: take the approver's name from the request body, unauthenticated.",
)
@click.option("--database-url", default=None, help="PostgreSQL (default $SAGACITY_DATABASE_URL).")
@click.option(
    "--bootstrap-servers", default=None, help="Kafka (default $SAGACITY_BOOTSTRAP_SERVERS)."
)
@click.option("--topic", default=None, help="Journal topic (default $SAGACITY_TOPIC).")
@click.option("--group-id", default=None, help="Consumer group (default sagacity-approvals).")
@click.option("--policy-version", default=None, help="Recorded on every decision (default 1).")
@click.option(
    "--approval-ttl",
    "approval_ttl_s",
    type=float,
    default=None,
    help="Seconds a request stays approvable (default 86400; 0 disables the service's bound).",
)
@click.option("--sweep-interval", "sweep_interval_s", type=float, default=None, help="Seconds.")
@click.option("--max-body", "max_body_bytes", type=int, default=None, help="Bytes.")
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="URL",
    help="Webhook told of new requests, requests about to expire and sagas that need a "
    "person (repeatable).",
)
@click.option(
    "--notify-format",
    type=click.Choice(["json", "slack"]),
    default=None,
    help="The webhook body: plain JSON, or Slack's incoming-webhook text (default json).",
)
@click.option(
    "--notify-before-expiry",
    "notify_before_expiry_s",
    type=float,
    default=None,
    help="Seconds before a request's deadline its warning is sent (default 900).",
)
@click.option(
    "--public-url",
    default=None,
    help="The console's address as people reach it, for links (default http://HOST:PORT).",
)
@click.option("--log-level", default="info", show_default=True)
def approvals(
    tools: tuple[str, ...],
    host: str | None,
    port: int | None,
    auth_file: Path | None,
    insecure_dev: bool,
    database_url: str | None,
    bootstrap_servers: str | None,
    topic: str | None,
    group_id: str | None,
    policy_version: str | None,
    approval_ttl_s: float | None,
    sweep_interval_s: float | None,
    max_body_bytes: int | None,
    notify: tuple[str, ...],
    notify_format: str | None,
    notify_before_expiry_s: float | None,
    public_url: str | None,
    log_level: str,
) -> None:
    """Serve the approvals API and the operator console (/ui/), and fold AWAITING_APPROVAL
    events into PostgreSQL.

    Settings also come from SAGACITY_APPROVALS_* (then SAGACITY_*) variables; see
    docs/operations/approvals.md.
    """
    import uvicorn

    from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        settings = ApprovalsSettings.from_env(
            tools=tools or None,
            host=host,
            port=port,
            auth_file=str(auth_file) if auth_file else None,
            insecure_dev=insecure_dev or None,
            database_url=database_url,
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            group_id=group_id,
            policy_version=policy_version,
            approval_ttl_s=approval_ttl_s,
            sweep_interval_s=sweep_interval_s,
            max_body_bytes=max_body_bytes,
            notify=notify or None,
            notify_format=notify_format,
            notify_before_expiry_s=notify_before_expiry_s,
            public_url=public_url,
        )
        server = ApprovalsServer(settings)
    except SagacityError as exc:
        raise click.ClickException(exc.message) from exc
    uvicorn.run(
        server.app,
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        proxy_headers=False,
        server_header=False,
    )
