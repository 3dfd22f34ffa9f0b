"""Auditor commands: ``sagacity verify``, ``sagacity export`` and ``sagacity replay``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sagacity.cli._db_options import EXIT_FAILED, conninfo, database_options, fail
from sagacity.cli._options import bootstrap_servers_option, topic_option

if TYPE_CHECKING:
    import psycopg

    from sagacity.consumers.archive._audit import AuditSummary
    from sagacity.consumers.archive._replay import ReplayReport


def _pinned(public_keys: tuple[str, ...]) -> tuple[bytes, ...]:
    from sagacity.consumers.archive._checkpoints import parse_public_key

    return tuple(parse_public_key(k) for k in public_keys)


_KEY_OPTION = click.option(
    "--public-key",
    "public_keys",
    multiple=True,
    envvar="SAGACITY_ARCHIVE_PUBLIC_KEY",
    help="Trusted checkpoint public key (hex or file); repeatable.  Default: keys recorded in "
    "the archive, which do not protect against someone able to write that table.",
)


@click.command()
@database_options
@click.option("--saga", "saga_id", default=None, help="Verify one saga.")
@click.option("--all", "all_sagas", is_flag=True, help="Verify every saga (the default).")
@_KEY_OPTION
@click.option(
    "--round",
    "known_rounds",
    multiple=True,
    metavar="ID:ROOT",
    help="A signing round recorded earlier (the 'latest signing round' a previous verify "
    "printed): the archive must still hold it with that root, so rounds removed at the end "
    "are caught.  Repeatable; needs every saga (not --saga).",
)
@click.option(
    "--require-signed",
    is_flag=True,
    help="Fail every saga whose newest events no checkpoint covers (an unsigned saga or "
    "tail); without it they are only counted in the summary.",
)
@click.option("--show", default=20, show_default=True, help="Failures listed in full.")
def verify(
    database_url: str,
    schema: str | None,
    saga_id: str | None,
    all_sagas: bool,
    public_keys: tuple[str, ...],
    known_rounds: tuple[str, ...],
    require_signed: bool,
    show: int,
) -> None:
    """Verify archived hash chains, signing rounds and checkpoints; exit 1 on any failure.

    With --public-key, a run in which nothing verified under the key fails too.
    """
    from sagacity.consumers.archive._audit import AuditSummary, iter_audits, unsigned_as_failure
    from sagacity.consumers.archive._db import connect
    from sagacity.errors import SagacityError

    if saga_id is not None and all_sagas:
        fail("--saga and --all exclude each other")
    if saga_id is not None and known_rounds:
        fail("--round is checked over every saga: drop --saga")
    known = _known_rounds(known_rounds)
    summary = AuditSummary(pinned=bool(public_keys))
    try:
        pinned = _pinned(public_keys)
        with connect(conninfo(database_url, schema)) as conn:
            total = 1 if saga_id is not None else _estimate_sagas(conn)
            started = time.perf_counter()
            with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
                for result in iter_audits(
                    conn,
                    saga_id=saga_id,
                    pinned_keys=pinned,
                    rounds=summary.rounds,
                    known_rounds=known,
                ):
                    if require_signed:
                        result = unsigned_as_failure(result)
                    summary.add(result, keep_failures=show)
                    bar.update(1)
            summary.seconds = time.perf_counter() - started
    except SagacityError as exc:
        fail(exc.message)
    if saga_id is not None and summary.sagas == 0:
        fail(f"the archive holds nothing for saga {saga_id!r}")
    _print_summary(summary, pinned=bool(public_keys), every_saga=saga_id is None)
    if not summary.all_ok:
        raise click.exceptions.Exit(EXIT_FAILED)


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
    from sagacity.consumers.archive._db import check_schema, mapped_errors

    check_schema(conn)
    with mapped_errors("count sagas"):
        row = conn.execute("SELECT count(*) FROM archive_saga_head").fetchone()
    return max(int(row[0]) if row else 0, 1)


def _print_summary(summary: AuditSummary, *, pinned: bool, every_saga: bool) -> None:
    from sagacity.consumers.archive._audit import AuditReason

    if summary.failures:
        click.echo(f"{'saga':<40} {'seq':>8}  {'reason':<20} detail")
        for f in summary.failures:
            click.echo(f"{f.saga_id:<40} {f.bad_seq or '-':>8}  {f.reason or '':<20} {f.detail}")
        click.echo("")
    if summary.unsigned:
        click.echo(f"{'saga (passed, not all signed)':<40} {'unsigned seqs':>17}")
        for u in summary.unsigned:
            first = u.head_seq - u.unsigned + 1
            click.echo(f"{u.saga_id:<40} {f'{first}..{u.head_seq}':>17}")
        click.echo("")
    if summary.rounds.failed:
        click.echo(f"{'signing round':>13}  {'reason':<20} detail")
        for round_id, (reason, detail) in sorted(summary.rounds.failed.items())[:20]:
            click.echo(f"{round_id:>13}  {reason.value:<20} {detail}")
        click.echo("")
    rate = summary.events / summary.seconds if summary.seconds else 0.0
    click.echo(f"{'sagas verified':<22} {summary.sagas:>12,}")
    click.echo(f"{'sagas ok':<22} {summary.ok:>12,}")
    click.echo(f"{'sagas failed':<22} {summary.sagas - summary.ok:>12,}")
    for reason, count in sorted(summary.by_reason.items()):
        click.echo(f"{'  ' + reason.value:<22} {count:>12,}")
    click.echo(f"{'events':<22} {summary.events:>12,}")
    click.echo(f"{'checkpoints verified':<22} {summary.checkpoints:>12,}")
    click.echo(f"{'unsigned sagas':<22} {summary.unsigned_sagas:>12,}")
    click.echo(f"{'unsigned tails':<22} {summary.unsigned_tails:>12,}")
    click.echo(f"{'  unsigned events':<22} {summary.unsigned_events:>12,}")
    click.echo(f"{'signing rounds':<22} {summary.rounds.rounds:>12,}")
    click.echo(f"{'  failed':<22} {len(summary.rounds.failed):>12,}")
    if every_saga and summary.rounds.latest is not None:
        round_id, root = summary.rounds.latest
        click.echo(f"latest signing round: {round_id}:{root}  (record it; pass it as --round)")
    click.echo(f"{'seconds':<22} {summary.seconds:>12.2f}")
    click.echo(f"{'events per second':<22} {rate:>12,.0f}")
    if not pinned:
        click.echo("note: checkpoint keys were read from the archive itself; pass --public-key")
    if summary.nothing_signed:
        click.echo("FAILED: nothing in the archive is signed by the pinned key(s)")
    elif summary.unsigned_sagas or summary.unsigned_tails:
        unsigned = summary.unsigned_sagas + summary.unsigned_tails
        if summary.by_reason.get(AuditReason.UNSIGNED):
            click.echo(f"FAILED: {unsigned} saga(s) end in events no checkpoint covers")
        else:
            click.echo(
                f"note: {unsigned} saga(s) end in events no checkpoint covers (normal until "
                "the next signing round); --require-signed fails them"
            )


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
def export(
    database_url: str, schema: str | None, saga_id: str, out: Path, public_keys: tuple[str, ...]
) -> None:
    """Write an audit bundle: events.jsonl, manifest.json, README.md, verify_bundle.py."""
    from sagacity.consumers.archive._db import connect
    from sagacity.consumers.archive._export import export_bundle
    from sagacity.errors import SagacityError

    try:
        pinned = _pinned(public_keys)
        with connect(conninfo(database_url, schema)) as conn:
            verdict = export_bundle(conn, saga_id, out, pinned_keys=pinned)
    except SagacityError as exc:
        fail(exc.message)
    click.echo(f"wrote {out}/ ({verdict.events} events, head seq {verdict.head_seq})")
    click.echo(f"check it with: python3 -I {out}/verify_bundle.py {out} --public-key <key>")
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
def replay(
    database_url: str,
    schema: str | None,
    bootstrap_servers: str,
    topic: str,
    saga_id: str | None,
    timeout: float,
) -> None:
    """Read the topic itself, verify its chains and diff them against the archive."""
    import os

    from sagacity.consumers.archive._db import connect
    from sagacity.consumers.archive._replay import diff_with_archive, read_topic
    from sagacity.errors import SagacityError
    from sagacity.producer._config import client_settings

    try:
        report, chains = read_topic(
            bootstrap_servers,
            topic,
            saga_id=saga_id,
            kafka_config=client_settings(os.environ),
            timeout=timeout,
        )
        with connect(conninfo(database_url, schema)) as conn:
            diff_with_archive(conn, report, chains, saga_id=saga_id)
    except SagacityError as exc:
        fail(exc.message)
    _print_replay(report)
    if not report.ok:
        raise click.exceptions.Exit(EXIT_FAILED)


def _print_replay(report: ReplayReport) -> None:
    from sagacity.producer import ForkKind

    bad = [s for s in report.sagas.values() if not s.ok]
    if bad:
        click.echo(f"{'saga':<40} {'topic':>7} {'archive':>7}  finding")
        for s in bad:
            findings = []
            for label, seqs in (
                ("missing", s.missing),
                ("extra", s.extra),
                ("differing", s.differing),
            ):
                if seqs:
                    shown = ", ".join(map(str, seqs[:10])) + (" …" if len(seqs) > 10 else "")
                    findings.append(f"{label}: {shown}")
            click.echo(
                f"{s.saga_id:<40} {s.topic_events:>7} {s.archive_events:>7}  {'; '.join(findings)}"
            )
        click.echo("")
    rejected = [
        (s.saga_id, r)
        for s in report.sagas.values()
        for r in s.rejected
        if r.kind is not ForkKind.DUPLICATE
    ]
    if rejected:
        click.echo("not in any chain (readers reject them; the archive quarantines them):")
        for saga_id, r in rejected[:20]:
            named = f" (its body names {r.entry.saga_id!r})" if r.kind is ForkKind.FOREIGN else ""
            click.echo(
                f"  {r.kind.value}: saga {saga_id} seq {r.entry.seq} at partition {r.partition}"
                f" offset {r.offset}{named}: {r.detail}"
            )
        click.echo("")
    for partition, offset, saga in report.unkeyed[:20]:
        click.echo(
            f"event without a text key at partition {partition} offset {offset} (body names "
            f"{saga!r}): in no saga's chain"
        )
    for partition, offset, why in report.undecodable[:20]:
        click.echo(f"undecodable message at partition {partition} offset {offset}: {why}")
    counts = dict.fromkeys(ForkKind, 0)
    for s in report.sagas.values():
        for r in s.rejected:
            counts[r.kind] += 1
    click.echo(f"{'messages read':<22} {report.messages:>10,}")
    click.echo(f"{'sagas':<22} {len(report.sagas):>10,}")
    click.echo(f"{'sagas matching':<22} {len(report.sagas) - len(bad):>10,}")
    click.echo(f"{'sagas differing':<22} {len(bad):>10,}")
    click.echo(f"{'forked events':<22} {counts[ForkKind.FORK]:>10,}")
    click.echo(f"{'foreign events':<22} {counts[ForkKind.FOREIGN] + len(report.unkeyed):>10,}")
    click.echo(f"{'edited events':<22} {counts[ForkKind.EDITED]:>10,}")
    click.echo(f"{'duplicate events':<22} {counts[ForkKind.DUPLICATE]:>10,}")
    click.echo(f"{'undecodable messages':<22} {len(report.undecodable):>10,}")
    if report.trimmed:
        click.echo("note: the topic was trimmed by Kafka retention; older events are archive-only")
