"""``sagacity demo``: show the journal going through real Kafka into real PostgreSQL."""

from __future__ import annotations

import os

import click

from sagacity.errors import SagacityError


@click.command("demo")
@click.option(
    "--topic", default=None, help="Journal topic (default: $SAGACITY_TOPIC or sagacity.journal)."
)
def demo(topic: str | None) -> None:
    """Publish a hash-chained saga, read it back, verify it, store it and read it back again.

    Uses SAGACITY_BOOTSTRAP_SERVERS and SAGACITY_DATABASE_URL when set; otherwise brings up
    this checkout's local stack (left running; `sagacity dev down` stops it).
    """
    from sagacity.demo import DemoSettings, run, topic_from_env

    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    dsn = os.environ.get("SAGACITY_DATABASE_URL")
    try:
        if not bootstrap or not dsn:
            from sagacity.dev import Stack

            endpoints = Stack().up(kafka=not bootstrap, postgres=not dsn)
            bootstrap = bootstrap or endpoints.bootstrap_servers
            dsn = dsn or endpoints.database_url
            click.echo("local stack up (`sagacity dev down` stops it)", err=True)
        assert bootstrap is not None
        assert dsn is not None
        run(
            DemoSettings(
                bootstrap_servers=bootstrap, database_url=dsn, topic=topic or topic_from_env()
            ),
            echo=click.echo,
        )
    except SagacityError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("demo complete: every stage succeeded")
