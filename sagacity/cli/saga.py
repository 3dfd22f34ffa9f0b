"""``sagacity saga``: operator actions on one saga's chain (taking over an abandoned saga)."""

from __future__ import annotations

import getpass
import os
import socket

import click

from sagacity.errors import (
    ConfigurationError,
    JournalError,
    JournalUnavailableError,
    SagacityError,
)


@click.group("saga")
def saga() -> None:
    """Operator actions on one saga (see docs/adr/0011-writer-lease.md)."""


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"operator:{user}@{socket.gethostname()}"


@saga.command("takeover")
@click.argument("saga_id")
@click.option(
    "--reason",
    default="its writer is presumed gone",
    show_default=True,
    help="Why the saga is taken over (journaled with the hand-off).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Take it even though its writer's lease has not expired (check it is gone first).",
)
@click.option(
    "--bootstrap-servers",
    "bootstrap",
    metavar="HOST:PORT[,…]",
    help="Kafka bootstrap servers [default: $SAGACITY_BOOTSTRAP_SERVERS].",
)
@click.option(
    "--topic",
    default=None,
    help="The journal topic [default: $SAGACITY_TOPIC or sagacity.journal].",
)
@click.option(
    "--actor",
    default=None,
    help="Who takes it over, journaled as the actor [default: operator:<user>@<host>].",
)
def takeover_cmd(
    saga_id: str,
    reason: str,
    force: bool,
    bootstrap: str | None,
    topic: str | None,
    actor: str | None,
) -> None:
    """Hand SAGA_ID, live under a writer presumed gone, to compensation.

    Refused while the writer's lease has not expired (its last event is younger than its
    lease plus $SAGACITY_MAX_CLOCK_SKEW_S) unless --force.  Journals COMPENSATION_REQUESTED
    with a compare-and-append: if the writer appends meanwhile, nothing is journaled.
    Exit status: 0 taken over, 1 refused, 2 usage, 3 the cluster does not answer.
    """
    from sagacity.producer import KafkaJournal, KafkaJournalSettings

    env = dict(os.environ)
    if bootstrap:
        env["SAGACITY_BOOTSTRAP_SERVERS"] = bootstrap
    if topic:
        env["SAGACITY_TOPIC"] = topic
    try:
        settings = KafkaJournalSettings.from_env(env)
    except ConfigurationError as exc:
        raise click.UsageError(f"{exc.message} (or pass --bootstrap-servers)") from exc
    try:
        journal = KafkaJournal.from_settings(settings)
    except JournalError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        raise SystemExit(3) from exc
    try:
        done = journal.take_over(saga_id, reason=reason, force=force, actor=actor or _operator())
    except JournalUnavailableError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        raise SystemExit(3) from exc
    except SagacityError as exc:
        click.echo(f"Refused: {exc.message}", err=True)
        raise SystemExit(1) from exc
    finally:
        journal.close()
    lease = done.lease
    ttl = "none recorded" if lease.lease_ttl_s is None else f"{lease.lease_ttl_s:g}s"
    click.echo(
        f"took over saga {saga_id!r} from writer {lease.writer!r}"
        f"{' (forced)' if done.forced else ''}: its last event (seq {lease.last_seq}) is "
        f"{lease.last_event_age_s:.1f}s old, lease {ttl}; journaled "
        f"{done.entry.event_type.value} at seq {done.entry.seq} — the compensation service "
        "undoes its steps (an INTENT without an outcome becomes SUSPECT)"
    )
