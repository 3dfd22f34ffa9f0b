"""``sagacity demo``: the Order / Product / Inventory example across the real services."""

from __future__ import annotations

import os
from pathlib import Path

import click

from sagacity.cli._exit import CommandError
from sagacity.errors import SagacityError


@click.command("demo")
@click.option(
    "--topic", default=None, help="Journal topic (default: $SAGACITY_TOPIC or sagacity.journal)."
)
@click.option(
    "--run-id",
    default=None,
    help="Suffix of the demo's saga ids (default: the UTC time and a random tag).",
)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the services' logs (default: a new temp dir); the keys and the "
    "approver's token the run makes there are deleted at its end.",
)
@click.option(
    "--compensation-tools",
    default="sagacity.demo.tools:TOOLS",
    show_default=True,
    metavar="package.module:attr",
    help="What the compensation service loads.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds any one step (service start-up, command, outcome, archive) may take.",
)
@click.option(
    "--approve-in-console",
    is_flag=True,
    help="Wait for the first saga's approval to be given in the console (its address and a "
    "sign-in token are printed) instead of on the command line.",
)
def demo(
    topic: str | None,
    run_id: str | None,
    run_dir: Path | None,
    compensation_tools: str,
    timeout_s: float,
    approve_in_console: bool,
) -> None:
    """Three sagas of an agent placing orders, across the approvals, compensation and archive
    services on Kafka and PostgreSQL; exit 1 naming the first expectation that fails.

    Uses SAGACITY_BOOTSTRAP_SERVERS and SAGACITY_DATABASE_URL when set; otherwise brings up
    this checkout's local stack (left running; `sagacity dev down` stops it).
    """
    import signal
    import sys

    from sagacity.demo import DemoError, DemoSettings, run, topic_from_env

    # SIGTERM unwinds like ^C, so the services the demo started are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        bootstrap, dsn, kek = _stack()
        run(
            DemoSettings(
                bootstrap_servers=bootstrap,
                database_url=dsn,
                key_encryption_key=kek,
                topic=topic or topic_from_env(),
                run_id=run_id,
                run_dir=run_dir,
                compensation_tools=compensation_tools,
                timeout_s=timeout_s,
                approve_in_console=approve_in_console,
            ),
            echo=click.echo,
        )
    except DemoError as exc:
        click.echo(f"demo FAILED: {exc}", err=True)
        if exc.log is not None:
            click.echo(f"--- last lines of {exc.log} ---", err=True)
            click.echo(exc.log_tail or "(empty)", err=True)
        raise click.exceptions.Exit(1) from exc
    except SagacityError as exc:
        raise CommandError.of(exc) from exc


def _stack() -> tuple[str, str, Path | None]:
    """The broker, the database and the key-encryption key the demo runs with: the variables'
    when set, else the checkout's local stack's (brought up, and left running)."""
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    dsn = os.environ.get("SAGACITY_DATABASE_URL")
    kek = os.environ.get("SAGACITY_KEY_ENCRYPTION_KEY_FILE") or None
    if not bootstrap or not dsn:
        from sagacity.dev import Stack

        endpoints = Stack().up(kafka=not bootstrap, postgres=not dsn)
        bootstrap = bootstrap or endpoints.bootstrap_servers
        dsn = dsn or endpoints.database_url
        kek = kek or (str(endpoints.key_encryption_key) if endpoints.key_encryption_key else None)
        click.echo("local stack up (`sagacity dev down` stops it)", err=True)
    assert bootstrap is not None
    assert dsn is not None
    return bootstrap, dsn, Path(kek) if kek else None
