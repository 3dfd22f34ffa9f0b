"""``sagacity serve archive``: the archiver service."""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._db_options import conninfo, database_options
from sagacity.cli._options import (
    bootstrap_servers_option,
    group_option,
    host_option,
    port_option,
    service_options,
    topic_option,
)
from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP


@click.command()
@bootstrap_servers_option("ARCHIVE")
@database_options
@topic_option("ARCHIVE")
@group_option("ARCHIVE", default=DEFAULT_ARCHIVE_GROUP)
@click.option("--batch-size", default=2000, show_default=True, help="Messages per transaction.")
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    default=None,
    show_envvar=True,
    help="Ed25519 key file for signed checkpoints (see `sagacity archive keygen`).",
)
@click.option("--checkpoint-interval", default=60.0, show_default=True, help="Seconds.")
@click.option(
    "--approvals-public-key",
    envvar="SAGACITY_APPROVALS_PUBLIC_KEY",
    show_envvar=True,
    default=None,
    help="Pinned approvals key(s), hex or files: decisions that do not verify are quarantined.",
)
@click.option(
    "--writer-registry",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_WRITER_REGISTRY",
    show_envvar=True,
    default=None,
    help="Registered writers and their keys (TOML): only their signed events are archived.",
)
@click.option(
    "--witness",
    envvar="SAGACITY_ARCHIVE_WITNESS",
    show_envvar=True,
    default=None,
    help="File path or http(s) URL outside the archive's database where each signed round is "
    "published (a URL receives a JSON POST); auditors check the archive against it.",
)
@port_option(
    "ARCHIVE", default=None, old="METRICS", help="Serve /metrics and /healthz on this port."
)
@host_option("ARCHIVE", default="127.0.0.1", old="METRICS")
@service_options("ARCHIVE")
def archive(
    bootstrap_servers: str,
    database_url: str,
    schema: str | None,
    topic: str,
    group: str,
    batch_size: int,
    signing_key: Path | None,
    checkpoint_interval: float,
    approvals_public_key: str | None,
    writer_registry: Path | None,
    witness: str | None,
    port: int | None,
    host: str,
    log_level: str,
) -> None:
    """Archive the journal topic into Postgres, exactly once, verifying every chain."""
    import os
    import signal

    from sagacity import compose
    from sagacity.consumers import configure_logging as configure
    from sagacity.consumers import log_hot_path
    from sagacity.consumers.archive import ArchiveService, ArchiveSettings
    from sagacity.producer import check_reachable, startup_timeout
    from sagacity.tracing import configure_from_env as configure_tracing

    configure(log_level)
    configure_tracing("sagacity-archive")  # OTEL_* variables, with the otel extra
    kafka_config = compose.client_settings(os.environ)
    # Sealed events are opened through the key service (docs/adr/0019-erasure.md §3): a missing
    # or malformed key-encryption key file stops the start-up, naming the setting; stored keys
    # under a KEK not held are warned of (those sagas' events fail one by one).
    with compose.starting_keys({"SAGACITY_DATABASE_URL": database_url, **os.environ}) as keys:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=bootstrap_servers,
                database_url=conninfo(database_url, schema),
                topic=topic,
                group_id=group,
                batch_size=batch_size,
                signing_key=signing_key,
                checkpoint_interval=checkpoint_interval,
                metrics_port=port,
                witness=witness,
                metrics_host=host,
                kafka_config=kafka_config,
                approvals_public_key=approvals_public_key,
                writer_registry=writer_registry,
            ),
            dependencies=compose.archive(keys=keys),
        )
        check_reachable(
            {**kafka_config, "bootstrap.servers": bootstrap_servers}, timeout=startup_timeout()
        )
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: service.stop())
        log_hot_path()
        service.run()
    finally:
        if keys is not None:
            keys.close()
