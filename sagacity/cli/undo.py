"""``sagacity saga undo``: undo a saga on demand, after reading what an undo could reverse.

The operator-signed compensation of an ended saga (``sagacity saga compensate``, ADR 0027),
preceded by the warning of what it cannot reverse: each step is listed with the undo that would
be called or why none would (``sagacity.undo._undo_preview``), from the declarations of ``--tools``
(what the compensation service registers), else from what the journal says.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sagacity.cli._exit import FAILED, CommandError
from sagacity.cli._kafka_env import kafka_env, kafka_options
from sagacity.cli.saga import compensate_cmd, load_operator_key, operator_key_option

if TYPE_CHECKING:
    from sagacity.undo._undo_preview import UndoPreview


@click.command("undo")
@click.option("--saga", "saga_id", required=True, help="The ended saga whose work is undone.")
@click.option(
    "--reason",
    required=True,
    help="Why (journaled in clear on the request, signed with it: no personal data).",
)
@click.option(
    "--tools",
    "tools",
    multiple=True,
    metavar="package.module:attr",
    help="The tools the compensation service registers: the list of what an undo reverses is "
    "read from their declarations (without them, from what the journal says).",
)
@click.option("--dry-run", is_flag=True, help="List what an undo would reverse; journal nothing.")
@operator_key_option
@click.option(
    "--actor",
    default=None,
    help="Who asks, journaled as the request's actor [default: operator:<user>@<host>].",
)
@kafka_options
@click.pass_context
def undo_cmd(
    ctx: click.Context,
    saga_id: str,
    reason: str,
    tools: tuple[str, ...],
    dry_run: bool,
    operator_key: Path | None,
    actor: str | None,
    bootstrap: str | None,
    topic: str | None,
) -> None:
    """Undo the steps of an ended saga that can be undone, and say which cannot first.

    Lists every step newest first (undo / KEEP, with the undo called or why none exists), then
    journals the operator-signed COMPENSATION_REQUESTED of `sagacity saga compensate`: the
    compensation service undoes each step not undone yet, exactly once. Exit status: 0
    journaled (or listed, with --dry-run), 1 refused, 2 usage, 3 the cluster does not answer.
    """
    if not dry_run:
        load_operator_key(operator_key)  # a usage error before anything is read
    preview = _preview(saga_id, tools, bootstrap, topic)
    for step in preview.steps:
        click.echo(step.line())
    if preview.undone:
        click.echo(f"undone already: seq {', '.join(str(s) for s in preview.undone)}")
    if not preview.steps:
        click.echo("nothing left to undo")
    if not preview.declared:
        click.echo(
            "note: read from the journal's word; the compensation service decides from its own "
            "declarations (pass --tools to read them here)"
        )
    warning = preview.warning()
    if warning is not None:
        click.echo(f"Warning: {warning}", err=True)
    if dry_run:
        return
    ctx.invoke(
        compensate_cmd,
        saga_id=saga_id,
        reason=reason,
        operator_key=operator_key,
        actor=actor,
        bootstrap=bootstrap,
        topic=topic,
    )


def _preview(
    saga_id: str, tools: tuple[str, ...], bootstrap: str | None, topic: str | None
) -> UndoPreview:
    from sagacity import Sagacity
    from sagacity._env import kafka_journal, key_service_from_env
    from sagacity.consumers.compensation import register_tools
    from sagacity.undo._undo_preview import preview_undo

    env, settings = kafka_env(bootstrap, topic)
    keys = key_service_from_env(env)
    # A journal that cannot be reached is the root group's one line and exit status 3.
    journal = kafka_journal(settings, keys=keys)
    try:
        entries = journal.entries(saga_id)
        if not entries:
            raise CommandError(f"saga {saga_id!r} is unknown on this journal", FAILED)
        registry = None
        if tools:
            declared = Sagacity(journal)
            register_tools(declared, tools)
            registry = declared.registry
        return preview_undo(entries, registry)
    finally:
        journal.close()
        if keys is not None:
            keys.close()
