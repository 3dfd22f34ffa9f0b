"""``sagacity erase``: erase one ended saga's data (docs/adr/0019-erasure.md §4,
docs/operations/erasure.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from sagacity.cli._db_options import conninfo
from sagacity.cli._exit import FAILED, UNAVAILABLE, USAGE
from sagacity.cli._kafka_env import kafka_env
from sagacity.cli.saga import _operator, load_operator_key, operator_key_option
from sagacity.errors import (
    ConfigurationError,
    ErasureRefusedError,
    JournalUnavailableError,
    PersistenceUnavailableError,
    SagacityError,
)

if TYPE_CHECKING:
    from sagacity.consumers.erasure import ErasureOutcome, ErasurePlan
    from sagacity.ports import Dependencies
    from sagacity.signing._operator_signature import OperatorSigner


@click.command("erase")
@click.option("--saga", "saga_id", required=True, help="The saga whose data is erased.")
@click.option(
    "--reason",
    required=True,
    help="Why (journaled in clear on the ERASED event and logged: no personal data in it).",
)
@click.option("--apply", "apply_", is_flag=True, help="Erase; without it, only say what would be.")
@operator_key_option
@click.option(
    "--actor",
    default=None,
    help="Who erases, journaled as the ERASED event's actor [default: operator:<user>@<host>].",
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
    "--database-url",
    envvar="SAGACITY_DATABASE_URL",
    required=True,
    help="The database of the data keys and the services' tables.",
)
@click.option(
    "--archive-database-url",
    envvar="SAGACITY_ARCHIVE_DATABASE_URL",
    default=None,
    help="The archive's database [default: --database-url].",
)
@click.option(
    "--archive-schema",
    envvar="SAGACITY_ARCHIVE_SCHEMA",
    default=None,
    help="Schema holding the archive (default: the connection's search_path).",
)
def erase(
    saga_id: str,
    reason: str,
    apply_: bool,
    operator_key: Path | None,
    actor: str | None,
    bootstrap: str | None,
    topic: str | None,
    database_url: str,
    archive_database_url: str | None,
    archive_schema: str | None,
) -> None:
    """Erase the saga's data: destroy its data key, clear its openings in the archive and its
    copies in the services' tables, and append ERASED to its chain.  Its chain, checkpoints
    and commitments stay: it still verifies.

    Dry run unless --apply, which needs the operator key (--operator-key or
    $SAGACITY_OPERATOR_SIGNING_KEY): the ERASED event is signed with it, and only an ERASED
    signed by it (or by a key in $SAGACITY_OPERATOR_PUBLIC_KEY) counts as done; any other is
    ignored.  Refused for an unknown saga, a saga still live (not ended, an
    approval or a compensation pending, a writer holding it) and a saga in chain form 1.
    Events after the saga's end that neither an operator's signed request nor a settlement
    (verified under $SAGACITY_APPROVALS_PUBLIC_KEY when set) reopened it for are ignored.
    Running it again completes an erasure a crash interrupted.  The data key is destroyed
    with the key service of $SAGACITY_KEY_ENCRYPTION_KEY_FILE (without it the saga is marked
    erased in the key store).  Exit status: 0 done (or would be), 1 refused, 2 usage, 3 Kafka
    or PostgreSQL does not answer.
    """
    if not reason.strip():
        raise click.UsageError("--reason must not be empty")
    signer = load_operator_key(operator_key) if apply_ or operator_key else None
    ports = _ports(
        bootstrap,
        topic,
        database_url=database_url,
        archive=conninfo(archive_database_url or database_url, archive_schema),
    )
    try:
        done = _run(ports, saga_id, apply_=apply_, actor=actor, reason=reason, signer=signer)
    finally:
        if ports.keys is not None:
            ports.keys.close()
        if ports.key_store is not None:
            ports.key_store.close()
    if done is not None:
        _print_outcome(done)


def _ports(
    bootstrap: str | None, topic: str | None, *, database_url: str, archive: str
) -> Dependencies:
    """The erasure is a composition of ports: the journal, the key service and the key
    store, the services' tables and the archive, each built by the composition root."""
    from sagacity import compose
    from sagacity._env import key_service_from_env

    env, settings = kafka_env(bootstrap, topic)
    env["SAGACITY_DATABASE_URL"] = database_url
    try:
        keys = key_service_from_env(env)
    except SagacityError as exc:
        _stop(exc)
    return compose.erasure(
        settings, database_url=database_url, archive_database_url=archive, keys=keys
    )


def _run(
    ports: Dependencies,
    saga_id: str,
    *,
    apply_: bool,
    actor: str | None,
    reason: str,
    signer: OperatorSigner | None,
) -> ErasureOutcome | None:
    """Plan (and with ``apply_`` carry out) the erasure on ``ports``; ``None``: a dry run,
    its plan printed."""
    from sagacity.consumers.erasure import apply_erasure, plan_erasure
    from sagacity.signing._decision_signature import verifier_from_env as approvals_from_env
    from sagacity.signing._operator_signature import verifier_from_env, verifier_with

    journals, key_store, services = ports.journals, ports.key_store, ports.service_tables
    archive = ports.archive
    assert journals is not None
    assert key_store is not None
    assert services is not None
    assert archive is not None
    try:
        pinned = verifier_from_env()
        approvals = approvals_from_env()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        journal = journals()
    except SagacityError as exc:
        _stop(exc)
    try:
        if not apply_:
            plan = plan_erasure(
                journal,
                saga_id,
                key_store=key_store,
                services=services,
                archive=archive,
                operator=verifier_with(signer, pinned),
                approvals=approvals,
            )
            _print_plan(plan)
            click.echo("dry run: nothing was changed; pass --apply to erase")
            return None
        assert signer is not None  # loaded above for --apply
        return apply_erasure(
            journal,
            saga_id,
            actor=actor or _operator(),
            reason=reason,
            keys=ports.keys,
            key_store=key_store,
            services=services,
            archive=archive,
            signer=signer,
            operator=pinned,
            approvals=approvals,
        )
    except SagacityError as exc:
        _stop(exc)
    finally:
        journal.close()


def _stop(exc: SagacityError) -> NoReturn:
    """Say why the command stopped and exit with the status of its kind."""
    if isinstance(exc, ErasureRefusedError):
        click.echo(f"Refused: {exc}", err=True)
        raise SystemExit(FAILED) from exc
    click.echo(f"error: {exc}", err=True)
    unavailable = isinstance(exc, JournalUnavailableError | PersistenceUnavailableError)
    raise SystemExit(UNAVAILABLE if unavailable else USAGE) from exc


def _seqs(plan: ErasurePlan) -> str:
    seqs = sorted(plan.fields)
    return f"seqs {seqs[0]}..{seqs[-1]}" if seqs else "no seqs"


def _print_plan(plan: ErasurePlan) -> None:
    """What ``--apply`` would do, said as such (nothing has been done)."""
    key = {
        "live": f"live (wrapped under KEK {plan.kek_id}): would be destroyed",
        "destroyed": "destroyed already (an erasure began): the rest would be completed",
        "none": "none (nothing of the saga was sealed): the saga would be marked erased",
    }[plan.key]
    click.echo(f"saga {plan.saga_id}: {plan.events} events on its chain")
    click.echo(f"  data fields to erase: {plan.field_count} ({_seqs(plan)})")
    click.echo(f"  data key: {key}")
    click.echo(
        f"  archive: the openings of its {plan.archived} archived events and its quarantined "
        "messages would be cleared"
    )
    click.echo(
        "  services: its approval requests' payloads and compensation claims would be cleared"
    )
    click.echo(
        "  chain: ERASED is on it already"
        if plan.recorded
        else "  chain: ERASED would be appended (actor, reason, the fields, the key's KEK id), "
        "signed with the operator key"
    )
    _print_ignored(plan)


def _print_ignored(plan: ErasurePlan) -> None:
    if plan.ignored:
        seqs = ", ".join(str(seq) for seq in plan.ignored)
        click.echo(
            f"  chain: ERASED at seq {seqs} is not signed by a pinned operator key: ignored "
            "(it names nobody as the eraser)"
        )
    if plan.after_end:
        events = ", ".join(f"seq {seq} ({kind})" for seq, kind in plan.after_end)
        click.echo(
            f"  chain: {events} after the saga's end: ignored (no operator's signed request "
            "or counted settlement reopened it, so it starts no work)"
        )


def _print_outcome(done: ErasureOutcome) -> None:
    plan = done.plan
    click.echo(f"erased saga {plan.saga_id}: {plan.field_count} data fields ({_seqs(plan)})")
    click.echo(
        "  data key: destroyed"
        if done.key_destroyed
        else "  data key: destroyed already by an earlier erasure"
    )
    click.echo(
        f"  archive: {done.archive_fields} fields and {done.quarantined} quarantined "
        "messages cleared"
    )
    click.echo(
        f"  services: {done.requests} approval requests, {done.events} kept events, "
        f"{done.claims} compensation claims and {done.attention} attention rows cleared"
    )
    if done.erased_event is not None:
        click.echo(
            f"  chain: ERASED appended at seq {done.erased_event.seq}, signed with the operator key"
        )
    else:
        click.echo("  chain: ERASED was on it already")
    _print_ignored(plan)
    click.echo(
        "the topic keeps its copies until its retention; sealed, they cannot be opened. "
        "VACUUM the key table and rotate the KEK on schedule (docs/operations/erasure.md)"
    )
