"""Auditor commands: ``sagacity verify``, ``sagacity export``, ``sagacity replay`` and
``sagacity audit watch``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sagacity.cli._audit_report import print_replay, print_verified, replay_json
from sagacity.cli._db_options import EXIT_FAILED, conninfo, database_options, fail
from sagacity.cli._operator_key import operator_public_key_option, pinned_operator, unverified_note
from sagacity.cli._options import bootstrap_servers_option, topic_option

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import psycopg

    from sagacity import JournalEntry
    from sagacity.consumers.archive import AuditSummary, ErasureAudit, WatchReport
    from sagacity.postgres.archive import SagaRefusals
    from sagacity.signing._operator_signature import OperatorVerifier


def _pinned(public_keys: tuple[str, ...]) -> tuple[bytes, ...]:
    from sagacity.consumers.archive import parse_public_key

    return tuple(parse_public_key(k) for k in public_keys)


_KEY_OPTION = click.option(
    "--public-key",
    "public_keys",
    multiple=True,
    envvar="SAGACITY_ARCHIVE_PUBLIC_KEY",
    help="Trusted checkpoint public key (hex or file); repeatable.  Default: keys recorded in "
    "the archive, which do not protect against someone able to write that table.",
)


_ROUND_OPTION = click.option(
    "--round",
    "known_rounds",
    multiple=True,
    metavar="ID:ROOT",
    help="A signing round recorded earlier (the 'latest signing round' a previous verify "
    "printed): the archive must still hold it with that root, so rounds removed at the end "
    "are caught.  Repeatable; needs every saga (not --saga).",
)


_REQUIRE_SIGNED_OPTION = click.option(
    "--require-signed",
    is_flag=True,
    help="Fail every saga whose newest events no checkpoint covers (an unsigned saga or "
    "tail); without it they are only counted in the summary.",
)


_WITNESS_OPTION = click.option(
    "--witness",
    envvar="SAGACITY_ARCHIVE_WITNESS",
    default=None,
    help="File path or http(s) URL where the archive publishes its latest signed round "
    "(a URL is read with GET): the archive must still hold that round, unchanged.",
)


@click.command()
@database_options
@click.option("--saga", "saga_id", default=None, help="Verify one saga.")
@click.option("--all", "all_sagas", is_flag=True, help="Verify every saga (the default).")
@_KEY_OPTION
@_ROUND_OPTION
@_WITNESS_OPTION
@_REQUIRE_SIGNED_OPTION
@click.option(
    "--allow-unopened",
    is_flag=True,
    help="The archive ingests without the key-encryption key, so sealed events hold their "
    "commitments only: do not report their missing openings as withheld.",
)
@operator_public_key_option
@click.option("--show", default=20, show_default=True, help="Failures listed in full.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
def verify(
    database_url: str,
    schema: str | None,
    saga_id: str | None,
    all_sagas: bool,
    public_keys: tuple[str, ...],
    known_rounds: tuple[str, ...],
    witness: str | None,
    require_signed: bool,
    allow_unopened: bool,
    operator_public_keys: tuple[str, ...],
    show: int,
    as_json: bool,
) -> None:
    """Verify archived hash chains, signing rounds and checkpoints, and what each chain says
    (the saga grammar, data withheld); exit 1 on any failure.

    With --public-key, a run in which nothing verified under the key fails too.
    """
    from sagacity.consumers.archive import AuditSummary
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import connect

    if saga_id is not None and all_sagas:
        fail("--saga and --all exclude each other")
    if saga_id is not None and (known_rounds or witness):
        fail("--round and --witness are checked over every saga: drop --saga")
    known = _known_rounds(known_rounds)
    operator = pinned_operator(operator_public_keys)
    summary = AuditSummary(pinned=bool(public_keys))
    try:
        pinned = _pinned(public_keys)
        with connect(conninfo(database_url, schema)) as conn:
            if witness is not None:
                known.update(_witnessed(conn, witness, pinned))
            erasures, refusals = _audit_into(
                summary,
                conn,
                saga_id=saga_id,
                pinned=pinned,
                known=known,
                require_signed=require_signed,
                allow_unopened=allow_unopened,
                operator=operator,
                show=show,
            )
    except SagacityError as exc:
        fail(exc)
    if saga_id is not None and summary.sagas == 0:
        fail(f"the archive holds nothing for saga {saga_id!r}")
    print_verified(
        summary,
        erasures,
        refusals,
        pinned=bool(public_keys),
        operator_pinned=operator is not None,
        every_saga=saga_id is None,
        as_json=as_json,
    )
    if not summary.all_ok or erasures.unrecorded:
        raise click.exceptions.Exit(EXIT_FAILED)


def _audit_into(
    summary: AuditSummary,
    conn: psycopg.Connection,
    *,
    saga_id: str | None,
    pinned: tuple[bytes, ...],
    known: dict[int, str],
    require_signed: bool,
    allow_unopened: bool,
    operator: OperatorVerifier | None,
    show: int,
) -> tuple[ErasureAudit, SagaRefusals | None]:
    """Audit the saga (or every saga) into ``summary``, with a progress bar on stderr; then
    its erasures, and for one saga what was kept out of its chain."""
    from sagacity.consumers.archive import audit_erasures, iter_audits, unsigned_as_failure
    from sagacity.postgres.archive import PostgresArchiveAudits, PostgresArchiveReads, saga_refusals

    total = 1 if saga_id is not None else _estimate_sagas(conn)
    started = time.perf_counter()
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        for result in iter_audits(
            PostgresArchiveAudits(conn),
            saga_id=saga_id,
            pinned_keys=pinned,
            rounds=summary.rounds,
            known_rounds=known,
            retention=summary.retention,
            allow_unopened=allow_unopened,
            operator=operator,
        ):
            if require_signed:
                result = unsigned_as_failure(result)
            summary.add(result, keep_failures=show)
            bar.update(1)
    summary.seconds = time.perf_counter() - started
    erasures = audit_erasures(
        PostgresArchiveReads(conn),
        saga_id,
        recorded=summary.erased_sagas,
        sagas=len(summary.erased_sagas),
        fields=summary.erased_fields,
    )
    return erasures, saga_refusals(conn, saga_id) if saga_id is not None else None


def _witnessed(conn: psycopg.Connection, witness: str, pinned: tuple[bytes, ...]) -> dict[int, str]:
    """The witnessed round as a known round (id: root), once its signature verifies."""
    from sagacity.consumers.archive import read_witness as read
    from sagacity.consumers.archive import signature_valid, trusted_keys
    from sagacity.postgres.archive import PostgresArchiveAudits

    signed = read(witness)
    if signed is None:
        fail(f"the witness {witness} holds no round yet")
    public = trusted_keys(PostgresArchiveAudits(conn), pinned).get(signed.key_id)
    if public is None or not signature_valid(public, signed):
        click.echo(
            f"witness: round {signed.round_id} at {witness} is not signed by a trusted key",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_FAILED)
    click.echo(f"witness: round {signed.round_id}:{signed.root} (checked against the archive)")
    return {signed.round_id: signed.root}


def _known_rounds(values: tuple[str, ...]) -> dict[int, str]:
    known: dict[int, str] = {}
    for value in values:
        number, _, root = value.partition(":")
        root = root.strip().lower()
        try:
            round_id = int(number)
            valid = round_id >= 1 and len(bytes.fromhex(root)) == 32
        except ValueError:
            valid = False
        if not valid:
            fail(f"--round {value!r}: expected ID:ROOT, a round number and 64 hex characters")
        known[round_id] = root
    return known


def _estimate_sagas(conn: psycopg.Connection) -> int:
    """Sagas in the archive, for the progress bar (the head table has one row per saga)."""
    from sagacity.postgres.archive import check_schema, mapped_errors

    check_schema(conn)
    with mapped_errors("count sagas"):
        row = conn.execute("SELECT count(*) FROM archive_saga_head").fetchone()
    return max(int(row[0]) if row else 0, 1)


@click.command()
@database_options
@click.option("--saga", "saga_id", required=True, help="The saga to export.")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write the bundle into.",
)
@_KEY_OPTION
@click.option(
    "--allow-unopened",
    is_flag=True,
    help="The archive ingests without the key-encryption key: its verdict does not report "
    "sealed events' missing openings as withheld.",
)
@operator_public_key_option
def export(
    database_url: str,
    schema: str | None,
    saga_id: str,
    out: Path,
    public_keys: tuple[str, ...],
    allow_unopened: bool,
    operator_public_keys: tuple[str, ...],
) -> None:
    """Write an audit bundle: events.jsonl, manifest.json, README.md, verify_bundle.py."""
    from sagacity.consumers.archive import export_bundle
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import PostgresSagaBundles, connect

    operator = pinned_operator(operator_public_keys)
    try:
        pinned = _pinned(public_keys)
        with connect(conninfo(database_url, schema)) as conn:
            verdict = export_bundle(
                PostgresSagaBundles(conn),
                saga_id,
                out,
                pinned_keys=pinned,
                allow_unopened=allow_unopened,
                operator=operator,
            )
    except SagacityError as exc:
        fail(exc)
    click.echo(f"wrote {out}/ ({verdict.events} events, head seq {verdict.head_seq})")
    sealed = _sealed_in_bundle(out)
    if sealed:
        click.echo(
            f"note: {sealed} event(s) hold sealed data the archive did not open (it runs without "
            "SAGACITY_KEY_ENCRYPTION_KEY_FILE, or the saga was erased): the bundle carries their "
            "commitments, which verify, not their values"
        )
    story = verdict.story
    note = unverified_note(story.data.unverified if story else 0, pinned=operator is not None)
    if note is not None:
        click.echo(note)
    click.echo(
        f"check it with: python3 -I {out}/verify_bundle.py {out} --public-key <key>"
        " --operator-public-key <operator key>"
    )
    if verdict.ok and verdict.unsigned:
        click.echo(
            f"warning: no checkpoint covers seqs {verdict.head_seq - verdict.unsigned + 1}.."
            f"{verdict.head_seq}: the bundle is refused unless the auditor passes "
            "--allow-unsigned; sign first (sagacity archive checkpoint) and export again",
            err=True,
        )
    if not verdict.ok:
        click.echo(
            f"warning: the archived chain does not verify: {verdict.reason} at seq "
            f"{verdict.bad_seq}: {verdict.detail}",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_FAILED)


@click.command()
@database_options
@bootstrap_servers_option("ARCHIVE")
@topic_option("ARCHIVE", show_default=False)
@click.option("--saga", "saga_id", default=None, help="Replay one saga only.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to reach the end.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
def replay(
    database_url: str,
    schema: str | None,
    bootstrap_servers: str,
    topic: str,
    saga_id: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Read the topic itself, verify its chains and diff them against the archive.

    Sealed events are opened through the key service ``SAGACITY_KEY_ENCRYPTION_KEY_FILE``
    configures (a field that fails authentication is reported undecodable); without it their
    chains verify by their commitments and the output says how many events stayed sealed.
    """
    import os

    from sagacity import compose
    from sagacity._env import client_settings, key_service_from_env
    from sagacity.consumers.archive import diff_with_archive, read_topic
    from sagacity.errors import SagacityError
    from sagacity.keys import KEK_SETTING
    from sagacity.postgres.archive import PostgresArchiveReads, connect

    keys = None
    try:
        keys = key_service_from_env({"SAGACITY_DATABASE_URL": database_url, **os.environ})
        dependencies = compose.archive(keys=keys)
        assert dependencies.topic_passes is not None
        assert dependencies.decode is not None
        report, chains = read_topic(
            bootstrap_servers,
            topic,
            passes=dependencies.topic_passes,
            decode=dependencies.decode,
            saga_id=saga_id,
            kafka_config=client_settings(os.environ),
            timeout=timeout,
        )
        with connect(conninfo(database_url, schema)) as conn:
            diff_with_archive(PostgresArchiveReads(conn), report, chains, saga_id=saga_id)
    except SagacityError as exc:
        fail(exc)
    finally:
        if keys is not None:
            keys.close()
    sealed = _sealed_unopened(chains)
    if as_json:
        click.echo(json.dumps({**replay_json(report), "sealed_unopened": sealed}, indent=2))
    else:
        print_replay(report)
        if sealed:
            why = "their sagas were erased" if keys is not None else f"{KEK_SETTING} is not set"
            click.echo(
                f"note: {sealed} event(s) hold sealed data not opened ({why}): their chains "
                "verify by their commitments"
            )
    if not report.ok:
        raise click.exceptions.Exit(EXIT_FAILED)


def _sealed_unopened(chains: Mapping[str, Sequence[JournalEntry]]) -> int:
    """Events whose data fields travel sealed and were not opened (commitments, no salts)."""
    return sum(1 for chain in chains.values() for e in chain if e.commitments and not e.salts)


def _sealed_in_bundle(out: Path) -> int:
    """Events of a written bundle with commitments but no openings (sealed, not opened)."""
    count = 0
    with (out / "events.jsonl").open(encoding="utf-8") as events:
        for line in events:
            event = json.loads(line)
            count += bool(event.get("commitments")) and not event.get("salts")
    return count


@click.group()
def audit() -> None:
    """Continuous auditing of an archive's log of signing rounds."""


_STATE_OPTION = click.option(
    "--state",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="This auditor's record of the rounds it saw (JSON lines), kept off the archive's "
    "host; created on the first run.",
)


_PEER_OPTION = click.option(
    "--peer",
    "peers",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Another auditor's record to compare with (repeatable): a round it recorded must be "
    "the one this auditor (or the archive) holds.",
)


_ERASURE_GRACE_OPTION = click.option(
    "--erasure-grace",
    "erasure_grace_s",
    default=900.0,
    show_default=True,
    help="Seconds after a saga's data key was destroyed before its archived chain must hold "
    "the ERASED event (else alert erasure_unrecorded); negative: not checked.",
)


@audit.command()
@database_options
@_STATE_OPTION
@_KEY_OPTION
@_WITNESS_OPTION
@_PEER_OPTION
@click.option("--webhook", default=None, help="http(s) URL each alert is POSTed to (JSON).")
@click.option("--once", is_flag=True, help="One pass, then exit (for cron and tests).")
@click.option("--interval", default=60.0, show_default=True, help="Seconds between passes.")
@_ERASURE_GRACE_OPTION
@operator_public_key_option
def watch(
    database_url: str,
    schema: str | None,
    state: Path,
    public_keys: tuple[str, ...],
    witness: str | None,
    peers: tuple[Path, ...],
    webhook: str | None,
    once: bool,
    interval: float,
    erasure_grace_s: float,
    operator_public_keys: tuple[str, ...],
) -> None:
    """Record every signing round, check each extends the last one recorded (RFC 9162
    consistency proof) and alert on a fork: exit 1, a log line, the webhook.  A data key
    destroyed without an archived ERASED event is an alert too (erasure_unrecorded)."""
    from sagacity.consumers.archive import AuditorState, trusted_keys, watch_once
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import PostgresArchiveAudits, PostgresWatchedArchive, connect

    if interval <= 0:
        fail("--interval must be positive")
    operator = pinned_operator(operator_public_keys)
    record = AuditorState(state)
    others = [AuditorState(p) for p in peers]
    while True:
        try:
            pinned = _pinned(public_keys)
            with connect(conninfo(database_url, schema)) as conn:
                keys = trusted_keys(PostgresArchiveAudits(conn), pinned)
                report = watch_once(
                    PostgresWatchedArchive(conn),
                    record,
                    keys=keys,
                    peers=others,
                    witness=witness,
                    erasure_grace_s=erasure_grace_s if erasure_grace_s >= 0 else None,
                    operator=operator,
                )
        except SagacityError as exc:
            fail(str(exc))
        _print_watched(
            report,
            webhook=webhook,
            keys_pinned=bool(public_keys),
            operator_pinned=operator is not None,
        )
        if once:
            return
        time.sleep(interval)


def _print_watched(
    report: WatchReport, *, webhook: str | None, keys_pinned: bool, operator_pinned: bool
) -> None:
    """One pass of ``audit watch``: the rounds recorded, then the alerts (posted to the
    webhook; exit 1) or how far the log is consistent."""
    from sagacity.consumers.archive import post_alerts

    for signed in report.recorded:
        click.echo(
            f"round {signed.round_id} recorded: {signed.leaf_count} head(s), log of "
            f"{signed.tree_size if signed.tree_size is not None else '-'}, root {signed.root}"
        )
    if report.alerts:
        for alert in report.alerts:
            click.echo(f"ALERT {alert.reason.value}: {alert.detail}", err=True)
        if webhook is not None:
            problem = post_alerts(webhook, report.alerts)
            if problem is not None:
                click.echo(f"error: {problem}", err=True)
        raise click.exceptions.Exit(EXIT_FAILED)
    if report.latest is not None:
        click.echo(f"consistent up to round {report.latest.round_id}:{report.latest.root}")
    if not keys_pinned:
        click.echo("note: round keys were read from the archive itself; pass --public-key")
    if not operator_pinned:
        click.echo(
            "note: no operator key is pinned: an ERASED with an operator signature counts "
            "unverified; pass --operator-public-key"
        )
