"""``sagacity dev``: run the local Kafka broker and PostgreSQL server of this checkout."""

from __future__ import annotations

import time

import click

from sagacity.errors import DevStackError


@click.group("dev")
def dev() -> None:
    """Local Kafka and PostgreSQL for development and tests (no Docker needed)."""


@dev.command("up")
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
@click.option("--postgres/--no-postgres", default=True, help="Start the PostgreSQL server.")
def up(kafka: bool, postgres: bool) -> None:
    """Start the stack (or reuse the running one) and print export lines for `eval`.

    Example: eval "$(sagacity dev up)"
    """
    from sagacity.dev import Stack

    stack = Stack()
    began = time.monotonic()
    try:
        endpoints = stack.up(kafka=kafka, postgres=postgres)
    except DevStackError as exc:
        raise click.ClickException(str(exc)) from exc
    elapsed = time.monotonic() - began
    for name in ("kafka", "postgres"):
        if not {"kafka": kafka, "postgres": postgres}[name]:
            continue
        verb = "started" if name in endpoints.started else "reused"
        click.echo(f"{name}: {verb}", err=True)
    click.echo(f"stack ready in {elapsed:.1f}s (state in {stack.home})", err=True)
    for line in endpoints.export_lines():
        click.echo(line)


@dev.command("down")
@click.option("--kafka/--no-kafka", default=True, help="Stop the Kafka broker.")
@click.option("--postgres/--no-postgres", default=True, help="Stop the PostgreSQL server.")
@click.option("--purge", is_flag=True, help="Also delete all data and state of the stack.")
def down(kafka: bool, postgres: bool, purge: bool) -> None:
    """Stop the broker and server this checkout's stack started (never anyone else's)."""
    from sagacity.dev import Stack

    stack = Stack()
    stopped = stack.down(kafka=kafka, postgres=postgres)
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}", err=True)
    if purge:
        stack.purge()
        click.echo(f"deleted {stack.home} and its data", err=True)


@dev.command("status")
def status() -> None:
    """Show each service's pid, address and whether it answers; exit 1 if any is down."""
    from sagacity.dev import Stack

    stack = Stack()
    all_up = True
    for service in stack.status():
        state = "running" if service.running else "stopped"
        all_up = all_up and service.running
        click.echo(f"{service.name:<9} {state:<8} pid={service.pid or '-'} {service.address or ''}")
    click.echo(f"state directory: {stack.home}", err=True)
    if not all_up:
        raise SystemExit(1)
