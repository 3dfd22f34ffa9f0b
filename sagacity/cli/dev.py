"""``sagacity dev``: the local Kafka broker (or cluster) and PostgreSQL server of a checkout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from sagacity.cli._exit import USAGE, CommandError
from sagacity.errors import DevStackError


@click.group("dev")
def dev() -> None:
    """Local Kafka and PostgreSQL for development and tests (no Docker needed)."""


@dev.command("up")
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
@click.option("--postgres/--no-postgres", default=True, help="Start the PostgreSQL server.")
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=None,
    help="Kafka brokers: 1, or a local KRaft cluster of N nodes (topics then default to "
    "replication min(3, N), min.insync.replicas one less) [default: what the stack runs, 1].",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Kafka over SASL_SSL (SCRAM-SHA-512, a CA made here), one principal per role "
    "(agents, approvals, compensation, archive, auditors; admin) and the production "
    "checklist's ACLs; the journal topic and its .dlq are made. Recorded until a purge.",
)
def up(kafka: bool, postgres: bool, brokers: int | None, secure: bool) -> None:
    """Start the stack (or reuse the running one) and print export lines for `eval`.

    Example: eval "$(sagacity dev up)"; a cluster: eval "$(sagacity dev up --brokers 3)";
    secured: eval "$(sagacity dev up --secure)", then act as a principal with
    eval "$(sagacity dev credentials agents)".
    """
    from sagacity.dev import Stack

    stack = Stack()
    began = time.monotonic()
    try:
        endpoints = stack.up(
            kafka=kafka,
            postgres=postgres,
            brokers=brokers or stack.brokers,
            secure=secure or (stack.secured and kafka),
        )
    except DevStackError as exc:
        raise CommandError.of(exc) from exc
    elapsed = time.monotonic() - began
    for name in ("kafka", "postgres"):
        if not {"kafka": kafka, "postgres": postgres}[name]:
            continue
        verb = "started" if name in endpoints.started else "reused"
        click.echo(f"{name}: {verb}", err=True)
    click.echo(f"stack ready in {elapsed:.1f}s (state in {stack.home})", err=True)
    for line in endpoints.export_lines():
        click.echo(line)


@dev.command("credentials")
@click.argument("principal")
def credentials(principal: str) -> None:
    """Print the export lines that make a process PRINCIPAL of the secured stack.

    Example: eval "$(sagacity dev credentials auditors)"
    """
    from sagacity.dev import Stack

    security = Stack().security()
    if security is None:
        raise CommandError("this stack is not secured: start it with --secure", USAGE)
    try:
        lines = security.export_lines(principal)
    except DevStackError as exc:
        raise CommandError.of(exc) from exc
    for line in lines:
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
@click.option("--kafka/--no-kafka", default=True, help="Show the Kafka broker(s).")
@click.option("--postgres/--no-postgres", default=True, help="Show the PostgreSQL server.")
def status(kafka: bool, postgres: bool) -> None:
    """Show each service's (each broker's) pid, address and state; exit 1 if one shown is down."""
    from sagacity.dev import Stack

    stack = Stack()
    all_up = True
    for service in stack.status():
        if not (postgres if service.name == "postgres" else kafka):
            continue
        state = service.detail or ("running" if service.running else "stopped")
        all_up = all_up and service.running
        click.echo(f"{service.name:<9} {state:<8} pid={service.pid or '-'} {service.address or ''}")
    click.echo(f"state directory: {stack.home}", err=True)
    if not all_up:
        raise SystemExit(1)


def _cluster() -> Any:
    from sagacity.dev import Stack

    try:
        return Stack().cluster()
    except DevStackError as exc:
        raise CommandError.of(exc) from exc


def _node_command(name: str, summary: str) -> Callable[[Callable[[Any, int], str]], Any]:
    def decorate(action: Callable[[Any, int], str]) -> Any:
        @dev.command(name, help=summary)
        @click.argument("node", type=click.IntRange(1, 9), metavar="N")
        def command(node: int) -> None:
            cluster = _cluster()
            try:
                click.echo(action(cluster, node))
            except DevStackError as exc:
                raise CommandError.of(exc) from exc

        return command

    return decorate


@_node_command("kill-broker", "SIGKILL broker N of the local cluster (no clean shutdown).")
def _kill(cluster: Any, node: int) -> str:
    return f"kafka-{node}: {'killed' if cluster.kill(node) else 'was not running'}"


@_node_command("restart-broker", "Stop broker N cleanly if it runs, start it, wait until ready.")
def _restart(cluster: Any, node: int) -> str:
    return f"kafka-{node}: running at {cluster.restart(node)}"


@_node_command(
    "pause-broker",
    "SIGSTOP broker N: it keeps its sockets but answers nothing (a zombie leader).",
)
def _pause(cluster: Any, node: int) -> str:
    return f"kafka-{node}: {'paused' if cluster.pause(node) else 'was not running'}"


@_node_command("resume-broker", "SIGCONT a paused broker N.")
def _resume(cluster: Any, node: int) -> str:
    return f"kafka-{node}: {'resumed' if cluster.resume(node) else 'was not running'}"
