"""``sagacity approvals extend``: an operator extends a request's deadline, signed.

Journals ``DEADLINE_EXTENDED`` signed with the operator key (docs/adr/0027-operator-signatures.md,
docs/operations/routing.md); the approvals service honours it only when its pinned
``SAGACITY_OPERATOR_PUBLIC_KEY`` verifies it.
"""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._exit import FAILED, CommandError
from sagacity.cli._kafka_env import kafka_env, kafka_options
from sagacity.cli._options import parse_duration
from sagacity.cli.saga import _operator, load_operator_key, operator_key_option
from sagacity.errors import JournalError, JournalUnavailableError


@click.command("extend")
@click.option("--saga", "saga_id", required=True, help="The saga of the request.")
@click.option("--seq", type=int, required=True, help="The request's seq.")
@click.option("--by", "by", required=True, help="How much longer it stays open: 90m, 2h, 3d.")
@operator_key_option
@click.option(
    "--actor",
    default=None,
    help="Who extends it, journaled as the actor [default: operator:<user>@<host>].",
)
@kafka_options
def extend_cmd(
    saga_id: str,
    seq: int,
    by: str,
    operator_key: Path | None,
    actor: str | None,
    bootstrap: str | None,
    topic: str | None,
) -> None:
    """Extend the deadline of the open request SEQ of SAGA by --by, signed with the operator key.

    Journals DEADLINE_EXTENDED (the request, the extension, and a reason spelling both out,
    signed at its place in the chain of this journal). The approvals service adds it to the
    request's deadline only when the signature verifies against its pinned
    $SAGACITY_OPERATOR_PUBLIC_KEY. Exit status: 0 journaled, 1 refused, 2 usage, 3 the cluster
    does not answer.
    """
    from sagacity._env import kafka_journal, key_service_from_env
    from sagacity.consumers.approvals import extend_deadline
    from sagacity.errors import (
        ApprovalError,
        InvalidArgumentError,
        TailMovedError,
        UnknownSagaError,
    )

    by_us = int(parse_duration(by) * 1_000_000)
    signer = load_operator_key(operator_key)
    env, settings = kafka_env(bootstrap, topic)
    keys = key_service_from_env(env)
    try:
        journal = kafka_journal(settings, keys=keys)
    except JournalError as exc:
        raise CommandError.of(exc) from exc
    try:
        entry = extend_deadline(
            journal, saga_id, seq, by_us, actor=actor or _operator(), signer=signer
        )
    except JournalUnavailableError as exc:
        raise CommandError.of(exc) from exc
    except (ApprovalError, InvalidArgumentError, TailMovedError, UnknownSagaError) as exc:
        raise CommandError(f"refused: {exc}", FAILED) from exc
    finally:
        journal.close()
        if keys is not None:
            keys.close()
    click.echo(
        f"journaled DEADLINE_EXTENDED at seq {entry.seq} of saga {saga_id!r}: request {seq} "
        f"extended by {by}, signed with operator key {signer.key_id}"
    )
