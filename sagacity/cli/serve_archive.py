"""``sagacity serve archive``: the archiver service."""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._db_options import conninfo, database_options, fail
from sagacity.cli._options import bootstrap_servers_option, topic_option


@click.command()
@bootstrap_servers_option("ARCHIVE")
@database_options
@topic_option("ARCHIVE")
@click.option(
    "--group", envvar="SAGACITY_ARCHIVE_GROUP", default="sagacity-archive", show_default=True
)
@click.option("--batch-size", default=2000, show_default=True, help="Messages per transaction.")
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    default=None,
    help="Ed25519 key file for signed checkpoints (see `sagacity archive keygen`).",
)
@click.option("--checkpoint-interval", default=60.0, show_default=True, help="Seconds.")
@click.option(
    "--witness",
    envvar="SAGACITY_ARCHIVE_WITNESS",
    default=None,
    help="File path or http(s) URL outside the archive's database where each signed round is "
    "published (a URL receives a JSON POST); auditors check the archive against it.",
)
@click.option(
    "--metrics-port",
    type=int,
    envvar="SAGACITY_ARCHIVE_METRICS_PORT",
    default=None,
    help="Serve /metrics and /healthz on this port.",
)
def archive(
    bootstrap_servers: str,
    database_url: str,
    schema: str | None,
    topic: str,
    group: str,
    batch_size: int,
    signing_key: Path | None,
    checkpoint_interval: float,
    witness: str | None,
    metrics_port: int | None,
) -> None:
    """Archive the journal topic into Postgres, exactly once, verifying every chain."""
    import logging
    import os
    import signal

    from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
    from sagacity.errors import SagacityError
    from sagacity.producer._config import client_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=bootstrap_servers,
                database_url=conninfo(database_url, schema),
                topic=topic,
                group_id=group,
                batch_size=batch_size,
                signing_key=signing_key,
                checkpoint_interval=checkpoint_interval,
                metrics_port=metrics_port,
                witness=witness,
                kafka_config=client_settings(os.environ),
            )
        )
    except SagacityError as exc:
        fail(exc.message)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: service.stop())
    try:
        service.run()
    except SagacityError as exc:
        fail(exc.message)
