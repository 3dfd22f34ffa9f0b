"""What the auditor commands print: ``sagacity verify``'s summary and ``sagacity replay``'s
report, as text or as JSON (``--json``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from sagacity.cli._operator_key import unverified_note

if TYPE_CHECKING:
    from sagacity.consumers.archive import AuditSummary, ErasureAudit, ReplayReport
    from sagacity.postgres.archive import SagaRefusals


def print_verified(
    summary: AuditSummary,
    erasures: ErasureAudit,
    refusals: SagaRefusals | None,
    *,
    pinned: bool,
    operator_pinned: bool,
    every_saga: bool,
    as_json: bool,
) -> None:
    """``sagacity verify``'s report: the audit's totals and failures, the erasures, and for
    one saga what was kept out of its chain."""
    if as_json:
        report = _summary_json(summary, pinned=pinned)
        report.update(_erasures_json(erasures))
        report["erasures_unverified"] = summary.erasures_unverified
        report["operator_key_pinned"] = operator_pinned
        if refusals is not None:
            report["quarantined"] = refusals.quarantined
            report["findings"] = [{"reason": r, "detail": d} for r, d in refusals.findings]
        report["ok"] = report["ok"] and not erasures.unrecorded
        click.echo(json.dumps(report, indent=2))
        return
    _print_summary(summary, pinned=pinned, every_saga=every_saga)
    _print_erasures(erasures)
    note = unverified_note(summary.erasures_unverified, pinned=operator_pinned)
    if note is not None:
        click.echo(note)
    if refusals is not None:
        _print_refusals(refusals)


def _print_refusals(refusals: SagaRefusals) -> None:
    """The saga's quarantined messages (by reason) and the archiver's findings about it: never
    part of its chain, shown so that what was kept out is seen (a forged event on another
    partition, a writer that may not write the saga, …)."""
    click.echo(f"{'quarantined':<22} {refusals.quarantined_total:>12,}")
    for reason, count in refusals.quarantined.items():
        click.echo(f"{'  ' + reason:<22} {count:>12,}")
    click.echo(f"{'archiver findings':<22} {len(refusals.findings):>12,}")
    for reason, detail in refusals.findings:
        click.echo(f"  {reason}: {detail}")


def _erasures_json(erasures: ErasureAudit) -> dict[str, Any]:
    return {
        "erased_sagas": erasures.sagas,
        "erased_fields": erasures.fields,
        "erasure_keys_checked": not erasures.keys_unreadable,
        "erasure_unrecorded": [
            {
                "saga_id": u.saga_id,
                "erased_at": u.erased_at.isoformat(),
                "erased_by": u.erased_by,
            }
            for u in erasures.unrecorded
        ],
    }


def _print_erasures(erasures: ErasureAudit) -> None:
    """The erasures (docs/adr/0019-erasure.md §4), counted from the ERASED events on the
    chains: erased sagas verify by their commitments; a destroyed key without an ERASED event
    fails the run."""
    click.echo(f"{'sagas erased':<22} {erasures.sagas:>12,}")
    click.echo(f"{'  fields erased':<22} {erasures.fields:>12,}")
    if erasures.keys_unreadable:
        click.echo(
            "note: this role may not read sagacity_data_keys: keys destroyed without an "
            "ERASED event (erasure_unrecorded) were not looked for"
        )
    for u in erasures.unrecorded:
        by = f" by {u.erased_by}" if u.erased_by else ""
        click.echo(
            f"FAILED: {u.saga_id}: erasure_unrecorded: its data key was destroyed at "
            f"{u.erased_at.isoformat()}{by}, and its archived chain holds no ERASED event "
            "(run 'sagacity erase --apply' for the saga to record it, or restore the key)"
        )


def _summary_json(summary: AuditSummary, *, pinned: bool) -> dict[str, Any]:
    latest = summary.rounds.latest
    return {
        "ok": summary.all_ok,
        "sagas": summary.sagas,
        "sagas_ok": summary.ok,
        "failed_by_reason": {r.value: n for r, n in sorted(summary.by_reason.items())},
        "failures": [
            {
                "saga_id": f.saga_id,
                "seq": f.bad_seq,
                "reason": None if f.reason is None else str(f.reason),
                "detail": f.detail,
                "writer": f.writer,
            }
            for f in summary.failures
        ],
        "events": summary.events,
        "checkpoints": summary.checkpoints,
        "signing_rounds": summary.rounds.rounds,
        "failed_rounds": {
            str(round_id): {"reason": reason.value, "detail": detail}
            for round_id, (reason, detail) in sorted(summary.rounds.failed.items())
        },
        "latest_round": None if latest is None else f"{latest[0]}:{latest[1]}",
        "unsigned_sagas": summary.unsigned_sagas,
        "unsigned_tails": summary.unsigned_tails,
        "unsigned_events": summary.unsigned_events,
        "keys_pinned": pinned,
        "seconds": round(summary.seconds, 3),
    }


def _print_summary(summary: AuditSummary, *, pinned: bool, every_saga: bool) -> None:
    from sagacity.consumers.archive import AuditReason

    if summary.failures:
        click.echo(f"{'saga':<40} {'seq':>8}  {'reason':<34} detail")
        for f in summary.failures:
            click.echo(f"{f.saga_id:<40} {f.bad_seq or '-':>8}  {f.reason or '':<34} {f.detail}")
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
    if summary.retention.failed:
        click.echo(f"{'retention record':<30} detail")
        for name, detail in sorted(summary.retention.failed.items())[:20]:
            click.echo(f"{name:<30} {detail}")
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
    click.echo(f"{'retention records':<22} {summary.retention.records:>12,}")
    click.echo(f"{'  records failed':<22} {len(summary.retention.failed):>12,}")
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


def print_replay(report: ReplayReport) -> None:
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
            findings += [f"{g.rule.value} at seq {g.seq}: {g.describe()}" for g in s.grammar[:3]]
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
    told = sum(1 for s in report.sagas.values() if s.grammar)
    click.echo(f"{'  impossible stories':<22} {told:>10,}")
    click.echo(f"{'forked events':<22} {counts[ForkKind.FORK]:>10,}")
    click.echo(f"{'foreign events':<22} {counts[ForkKind.FOREIGN] + len(report.unkeyed):>10,}")
    click.echo(f"{'edited events':<22} {counts[ForkKind.EDITED]:>10,}")
    click.echo(f"{'duplicate events':<22} {counts[ForkKind.DUPLICATE]:>10,}")
    click.echo(f"{'undecodable messages':<22} {len(report.undecodable):>10,}")
    if report.trimmed:
        click.echo("note: the topic was trimmed by Kafka retention; older events are archive-only")


def replay_json(report: ReplayReport) -> dict[str, Any]:
    bad = [s for s in report.sagas.values() if not s.ok]
    return {
        "ok": report.ok,
        "topic": report.topic,
        "messages": report.messages,
        "sagas": len(report.sagas),
        "sagas_matching": len(report.sagas) - len(bad),
        "differing": [
            {
                "saga_id": s.saga_id,
                "topic_events": s.topic_events,
                "archive_events": s.archive_events,
                "missing": s.missing,
                "extra": s.extra,
                "differing": s.differing,
                "grammar": [
                    {
                        "finding": g.rule.value,
                        "seq": g.seq,
                        "detail": g.detail,
                        "writer": g.writer,
                    }
                    for g in s.grammar
                ],
            }
            for s in bad
        ],
        "rejected": [
            {
                "saga_id": s.saga_id,
                "kind": r.kind.value,
                "seq": r.entry.seq,
                "partition": r.partition,
                "offset": r.offset,
                "detail": r.detail,
            }
            for s in report.sagas.values()
            for r in s.rejected
        ],
        "unkeyed": [
            {"partition": p, "offset": o, "body_saga_id": saga} for p, o, saga in report.unkeyed
        ],
        "undecodable": [
            {"partition": p, "offset": o, "why": why} for p, o, why in report.undecodable
        ],
        "trimmed": report.trimmed,
    }
