"""``sagacity saga``: operator actions on one saga's chain (taking over an abandoned saga,
settling a suspect step, undoing an ended saga on the operator's signed word)."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sagacity.cli._db_options import database_options, fail
from sagacity.cli._exit import FAILED, CommandError
from sagacity.cli._kafka_env import kafka_env, kafka_options
from sagacity.cli._options import parse_duration
from sagacity.cli.approvals import DEFAULT_URL as APPROVALS_URL
from sagacity.cli.approvals import _Client as ApprovalsClient
from sagacity.errors import (
    ConfigurationError,
    JournalError,
    JournalUnavailableError,
    SagacityError,
)

if TYPE_CHECKING:
    from sagacity.signing._operator_signature import OperatorSigner

F = TypeVar("F", bound=Callable[..., Any])


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
@kafka_options
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
    from sagacity._env import kafka_journal

    _, settings = kafka_env(bootstrap, topic)
    try:
        journal = kafka_journal(settings)
    except JournalError as exc:  # unreachable: 3; no such topic, or refused its ACL: 2
        raise CommandError.of(exc) from exc
    try:
        done = journal.take_over(saga_id, reason=reason, force=force, actor=actor or _operator())
    except JournalUnavailableError as exc:
        raise CommandError.of(exc) from exc
    except SagacityError as exc:
        raise CommandError(f"refused: {exc}", FAILED) from exc
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


@saga.command("sweep")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    help="Propose sagas whose last archived event is older than this (90s, 15m, 2h, 1d).",
)
@click.option("--apply", is_flag=True, help="Take over the sagas whose lease has expired.")
@click.option("--limit", default=100, show_default=True, help="Most candidates judged per run.")
@click.option(
    "--reason",
    default="its writer is presumed gone (swept)",
    show_default=True,
    help="Why the sagas are taken over (journaled with each hand-off).",
)
@kafka_options
@database_options
def sweep_cmd(
    older_than: str,
    apply: bool,
    limit: int,
    reason: str,
    bootstrap: str | None,
    topic: str | None,
    database_url: str,
    schema: str | None,
) -> None:
    """Find live sagas whose writer went quiet and, with --apply, hand them to compensation.

    Candidates come from the archive (their last archived event is older than --older-than
    and leaves the saga with its writer); each is then judged on the topic by its writer's
    lease, exactly as `sagacity saga takeover` without --force does. A dry run (the default)
    only reports. Run it from cron (or a Kubernetes CronJob) next to the compensation service.
    Exit status: 0 done, 2 usage or no archive, 3 the cluster does not answer.
    """
    from sagacity._env import kafka_journal
    from sagacity.cli._db_options import conninfo
    from sagacity.consumers.archive import quiet_sagas
    from sagacity.consumers.archive import sweep_abandoned as sweep
    from sagacity.postgres.archive import PostgresArchiveReads, connect

    seconds = parse_duration(older_than)
    _, settings = kafka_env(bootstrap, topic)
    try:
        with connect(conninfo(database_url, schema)) as conn:
            heads = PostgresArchiveReads(conn)
            candidates = quiet_sagas(heads, topic=settings.topic, older_than_s=seconds, limit=limit)
    except SagacityError as exc:
        fail(exc)
    if not candidates:
        click.echo(f"no live saga on {settings.topic!r} has been quiet for {older_than}")
        return
    try:
        journal = kafka_journal(settings)
    except JournalError as exc:  # unreachable: 3; no such topic, or refused its ACL: 2
        raise CommandError.of(exc) from exc
    try:
        results = sweep(
            journal,
            [c.saga_id for c in candidates],
            apply=apply,
            reason=reason,
            actor=_operator(),
        )
    except JournalUnavailableError as exc:
        raise CommandError.of(exc) from exc
    finally:
        journal.close()
    quiet = {c.saga_id: c for c in candidates}
    for result in results:
        c = quiet[result.saga_id]
        click.echo(
            f"{result.saga_id:<40} {c.head_event} seq {c.head_seq}, {c.head_age_s:,.0f}s quiet: "
            f"{result.outcome.value} — {result.detail}"
        )
    if not apply:
        click.echo("dry run: pass --apply to take over the sagas marked 'would take over'")


@saga.command("resolve")
@click.argument("saga_id")
@click.argument("seq", type=int)
@click.option(
    "--outcome",
    required=True,
    type=click.Choice(["executed", "not-executed", "fixed-by-hand"]),
    help="Did the call in doubt take effect? executed: its effect is undone (once); "
    "not-executed: nothing to undo; fixed-by-hand: a person repaired it.",
)
@click.option("--note", required=True, help="What you found out (journaled with your name).")
@click.option(
    "--url",
    envvar="SAGACITY_APPROVALS_URL",
    default=APPROVALS_URL,
    show_default=True,
    help="The approvals service.",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="File holding the bearer token (default: $SAGACITY_APPROVALS_TOKEN).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds per request.")
def resolve_cmd(
    saga_id: str,
    seq: int,
    outcome: str,
    note: str,
    url: str,
    token_file: Path | None,
    as_json: bool,
    timeout: float,
) -> None:
    """Settle the SUSPECT step SEQ of SAGA_ID through the approvals service.

    The settlement is journaled (SUSPECT_SETTLED) as the token's principal with the note, and
    the saga is handed to the compensation service, which ends it (COMPENSATED once nothing is
    dirty).  SEQ is the step the SUSPECT names (the seq in the saga's dirty list).
    """
    token = (
        token_file.read_text(encoding="utf-8").strip()
        if token_file is not None
        else os.environ.get("SAGACITY_APPROVALS_TOKEN")
    )
    client = ApprovalsClient(url, token or None, as_json, timeout)
    data = client.call(
        "POST", f"/sagacity/settle/{saga_id}/{seq}", body={"outcome": outcome, "note": note}
    )
    human = (
        f"settled {data['saga_id']}/{data['seq']} {data['outcome']} by {data['settled_by']}; "
        f"saga {data['saga_status']}"
    )
    click.echo(json.dumps(data, indent=2) if as_json else human)


def operator_key_option(func: F) -> F:
    """``--operator-key FILE`` ($SAGACITY_OPERATOR_SIGNING_KEY): the key operator events are
    signed with (docs/adr/0027-operator-signatures.md)."""
    return click.option(
        "--operator-key",
        "operator_key",
        envvar="SAGACITY_OPERATOR_SIGNING_KEY",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The operator's private key (from `sagacity keys operator-keygen`).",
    )(func)


def load_operator_key(path: Path | None) -> OperatorSigner:
    """The operator's :class:`~sagacity.signing._operator_signature.OperatorSigner` from ``path``.

    Raises:
        click.UsageError: no key given, or the file is not an operator key (one line).
    """
    from sagacity.errors import SigningKeyError
    from sagacity.signing._operator_signature import OperatorSigner

    if path is None:
        raise click.UsageError(
            "no operator key: pass --operator-key FILE or set SAGACITY_OPERATOR_SIGNING_KEY "
            "(create one with `sagacity keys operator-keygen --out FILE`)"
        )
    try:
        return OperatorSigner.from_file(path)
    except SigningKeyError as exc:
        raise click.UsageError(f"--operator-key: {exc}") from exc


@saga.command("compensate")
@click.option("--saga", "saga_id", required=True, help="The ended saga whose work is undone.")
@click.option(
    "--reason",
    required=True,
    help="Why (journaled in clear on the request, signed with it: no personal data).",
)
@operator_key_option
@click.option(
    "--actor",
    default=None,
    help="Who asks, journaled as the request's actor [default: operator:<user>@<host>].",
)
@kafka_options
def compensate_cmd(
    saga_id: str,
    reason: str,
    operator_key: Path | None,
    actor: str | None,
    bootstrap: str | None,
    topic: str | None,
) -> None:
    """Undo the executed steps of a saga that has ended (COMPLETED, COMPENSATED, …).

    Journals COMPENSATION_REQUESTED signed with the operator key; the compensation service
    acts on it only when that signature verifies against its pinned
    $SAGACITY_OPERATOR_PUBLIC_KEY, and undoes each step not undone yet, exactly once.
    Refused for an unknown, live, erased or not-ended saga and while a compensation of it is
    pending. Exit status: 0 journaled, 1 refused, 2 usage, 3 the cluster does not answer.
    """
    from sagacity._env import kafka_journal, key_service_from_env
    from sagacity.consumers.compensation import request_compensation
    from sagacity.errors import CompensationRefusedError, TailMovedError
    from sagacity.signing._operator_signature import verifier_from_env

    signer = load_operator_key(operator_key)
    env, settings = kafka_env(bootstrap, topic)
    try:
        pinned = verifier_from_env(env)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    keys = key_service_from_env(env)
    try:
        journal = kafka_journal(settings, keys=keys)
    except JournalError as exc:  # unreachable: 3; no such topic, or refused its ACL: 2
        raise CommandError.of(exc) from exc
    try:
        entry = request_compensation(
            journal,
            saga_id,
            reason=reason,
            actor=actor or _operator(),
            signer=signer,
            operator=pinned,
        )
    except JournalUnavailableError as exc:
        raise CommandError.of(exc) from exc
    except (CompensationRefusedError, TailMovedError) as exc:
        raise CommandError(f"refused: {exc}", FAILED) from exc
    finally:
        journal.close()
        if keys is not None:
            keys.close()
    click.echo(
        f"journaled COMPENSATION_REQUESTED at seq {entry.seq} of saga {saga_id!r}, signed with "
        f"operator key {signer.key_id}: the compensation service (pinning that key in "
        "SAGACITY_OPERATOR_PUBLIC_KEY) undoes its steps not undone yet"
    )


def _register_undo() -> None:
    # `saga undo` lives in its own module (it reuses `saga compensate`): registered here.
    from sagacity.cli.undo import undo_cmd

    saga.add_command(undo_cmd)


_register_undo()


def _register_extend() -> None:
    # `approvals extend` signs with the operator key, with this module's options: in its own
    # module, registered on the approvals group here (approvals is imported before it).
    from sagacity.cli.approvals import approvals
    from sagacity.cli.approvals_extend import extend_cmd

    approvals.add_command(extend_cmd)


_register_extend()
