"""Judging one saga of the archive: its chain, then its checkpoints, then its recorded head.

Per saga the first finding wins, in this order (docs/adr/0017-audit-coverage.md): the chain over
every archived row; each checkpoint (its round or signature, then its seq and hash against the
chain); the head the archiver recorded (``truncated``, ``beyond_head``, ``head_mismatch``).  A
saga that passes records how many of its newest events no checkpoint covers
(:attr:`SagaAudit.unsigned`).  :func:`judge` is the reference, from entries;
:func:`audit_one` judges what the run over the archive read for a saga (a bulk verdict, or
rows, which the column check or the reference path walk).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sagacity.chain import verify
from sagacity.chain._fastverify import BatchVerdict
from sagacity.consumers.archive._checkpoints import Checkpoint, signature_valid
from sagacity.consumers.archive._columncheck import verified_head
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._roundaudit import RoundAudit
from sagacity.consumers.archive._verdicts import RetentionAudit, SagaAudit
from sagacity.entries._events import GENESIS_HASH, JournalEntry
from sagacity.errors import SerializationError
from sagacity.ports import SagaRows

_Finding = tuple[int, AuditReason, str]
"""A failure: the bad seq, its reason and the detail."""


def judge(
    saga_id: str,
    entries: Sequence[JournalEntry],
    *,
    checkpoints: Sequence[Checkpoint] = (),
    anchor: tuple[int, str] | None = None,
    recorded_head: tuple[int, str] | None,
    keys: Mapping[str, bytes],
    rounds: RoundAudit | None = None,
) -> SagaAudit:
    """Audit one saga from its archived entries (stored order) and its checkpoints.

    Args:
        entries: the saga's entries in the order they were archived.
        checkpoints: the saga's signed checkpoints.
        anchor: the last (seq, hash) removed by retention, if the saga's start was dropped.
        recorded_head: the head (seq, hash) the archive's head table records (unsigned);
            ``None`` when it records none.
        keys: trusted public keys by key id.
        rounds: the audit of the signing rounds the checkpoints belong to; without it a
            checkpoint of a round fails (``bad_signature``: its round was not verified).
    """
    after_seq, after_hash = anchor if anchor is not None else (0, GENESIS_HASH)
    verdict = verify(entries, saga_id=saga_id, after_seq=after_seq, after_hash=after_hash)
    base = {"saga_id": saga_id, "events": len(entries)}
    if not verdict.ok:
        assert verdict.reason is not None
        reason = AuditReason(verdict.reason.value)
        detail = verdict.detail
        if reason is AuditReason.GAP and any(e.seq == verdict.bad_seq for e in entries):
            # The "missing" seq is there, later in stored order: rows were moved, not lost.
            reason = AuditReason.REORDERED
            detail = f"seq {verdict.bad_seq} is stored after a later seq"
        return SagaAudit(
            ok=False,
            head_seq=verdict.head_seq,
            head_hash=verdict.head_hash,
            bad_seq=verdict.bad_seq,
            reason=reason,
            detail=detail,
            **base,  # type: ignore[arg-type]
        )
    return judge_checkpoints(
        saga_id,
        events=len(entries),
        head_seq=verdict.head_seq,
        head_hash=verdict.head_hash,
        by_seq={e.seq: e.hash for e in entries},
        checkpoints=checkpoints,
        after_seq=after_seq,
        after_hash=after_hash,
        recorded_head=recorded_head,
        keys=keys,
        rounds=rounds,
    )


def judge_checkpoints(
    saga_id: str,
    *,
    events: int,
    head_seq: int,
    head_hash: str,
    by_seq: Mapping[int, str],
    checkpoints: Sequence[Checkpoint],
    after_seq: int,
    after_hash: str,
    recorded_head: tuple[int, str] | None,
    keys: Mapping[str, bytes],
    rounds: RoundAudit | None,
) -> SagaAudit:
    """The checkpoint and head-table half of :func:`judge`, for a chain that verified up to
    ``head_seq`` / ``head_hash`` (``by_seq``: its hashes by seq)."""
    base = {"saga_id": saga_id, "events": events, "head_seq": head_seq, "head_hash": head_hash}

    def failed(seq: int, reason: AuditReason, detail: str, checked: int) -> SagaAudit:
        return SagaAudit(
            ok=False,
            checkpoints=checked,
            bad_seq=seq,
            reason=reason,
            detail=detail,
            **base,  # type: ignore[arg-type]
        )

    checked = 0
    for cp in sorted(checkpoints, key=lambda c: (c.seq, c.signed_at_us)):
        finding = _signature_finding(cp, keys=keys, rounds=rounds)
        if finding is not None:
            return failed(*finding, checked)
        checked += 1
        finding = _coverage_finding(
            cp, head_seq=head_seq, by_seq=by_seq, after_seq=after_seq, after_hash=after_hash
        )
        if finding is not None:
            return failed(*finding, checked)
    if (  # the common case costs two comparisons
        recorded_head is None or recorded_head[0] != head_seq or recorded_head[1] != head_hash
    ):
        at_head = _judge_head(
            head_seq=head_seq, head_hash=head_hash, after_seq=after_seq, recorded=recorded_head
        )
        if at_head is not None:
            return failed(*at_head, checked)
    if len(checkpoints) == 1:
        signed_seq = checkpoints[0].seq
    else:
        signed_seq = max([cp.seq for cp in checkpoints]) if checkpoints else 0
    return SagaAudit(
        ok=True,
        checkpoints=checked,
        signed_seq=signed_seq,
        unsigned=max(head_seq - max(signed_seq, after_seq), 0),
        **base,  # type: ignore[arg-type]
    )


def _signature_finding(
    cp: Checkpoint, *, keys: Mapping[str, bytes], rounds: RoundAudit | None
) -> _Finding | None:
    """The finding on a checkpoint's round (it failed, or was not verified) or its own
    signature (an untrusted key, or one that does not verify)."""
    if cp.round_id is not None:
        finding = (
            (AuditReason.BAD_SIGNATURE, f"round {cp.round_id} was not verified")
            if rounds is None
            else rounds.failed.get(cp.round_id)
        )
        return None if finding is None else (cp.seq, finding[0], finding[1])
    public = keys.get(cp.key_id)
    if public is None:
        return cp.seq, AuditReason.UNKNOWN_KEY, f"signed by untrusted key {cp.key_id}"
    if not signature_valid(public, cp):
        return cp.seq, AuditReason.BAD_SIGNATURE, "checkpoint signature does not verify"
    return None


def _coverage_finding(
    cp: Checkpoint, *, head_seq: int, by_seq: Mapping[int, str], after_seq: int, after_hash: str
) -> _Finding | None:
    """The finding on a verified checkpoint's seq and hash against the chain."""
    if cp.seq < after_seq:
        return None  # removed by retention; nothing left to compare with
    expected = after_hash if cp.seq == after_seq else by_seq.get(cp.seq)
    if cp.seq > head_seq:
        return (
            head_seq + 1,
            AuditReason.TRUNCATED,
            f"a checkpoint signed seq {cp.seq} but the archive ends at seq {head_seq}",
        )
    if expected != cp.hash:
        return (
            cp.seq,
            AuditReason.CHECKPOINT_MISMATCH,
            f"seq {cp.seq} was signed with hash {cp.hash[:16]}…, archive has "
            f"{(expected or '?')[:16]}…",
        )
    return None


def _judge_head(
    *, head_seq: int, head_hash: str, after_seq: int, recorded: tuple[int, str] | None
) -> tuple[int, AuditReason, str] | None:
    """The finding (bad seq, reason, detail) on a verified chain's head against the head the
    archiver recorded, or ``None``.  The archiver moves the head in the transaction that
    inserts the rows, so in one snapshot the two agree; rows past it were written by
    something else (with valid hashes, since the chain verified)."""
    if recorded is None:
        if head_seq > after_seq:
            return (
                after_seq + 1,
                AuditReason.BEYOND_HEAD,
                f"the archive records no head for this saga but holds seqs {after_seq + 1}"
                f"..{head_seq}: rows written outside the archiver",
            )
        return None
    recorded_seq, recorded_hash = recorded
    if recorded_seq > head_seq:
        return (
            head_seq + 1,
            AuditReason.TRUNCATED,
            f"the archive recorded head seq {recorded_seq} but ends at seq {head_seq}",
        )
    if recorded_seq < head_seq:
        return (
            recorded_seq + 1,
            AuditReason.BEYOND_HEAD,
            f"the archive recorded head seq {recorded_seq} but holds seqs up to {head_seq}:"
            " rows written outside the archiver",
        )
    if recorded_hash.lower() != head_hash.lower():
        return (
            head_seq,
            AuditReason.HEAD_MISMATCH,
            f"seq {head_seq} has hash {head_hash[:16]}…, the archive recorded "
            f"{recorded_hash[:16]}… as its head",
        )
    return None


def _checkpoint_of(row: Sequence[Any]) -> Checkpoint:
    """A checkpoint from its row (``saga_id, seq, hash, signed_at_us, key_id, signature,
    round_id, leaf_index``)."""
    return Checkpoint(
        saga_id=row[0],
        seq=int(row[1]),
        hash=row[2],
        signed_at_us=int(row[3]),
        key_id=row[4],
        signature=row[5],
        round_id=None if row[6] is None else int(row[6]),
        leaf_index=None if row[7] is None else int(row[7]),
    )


def audit_one(
    archive: SagaRows,
    saga: str,
    *,
    verdict: BatchVerdict | None,
    rows: Sequence[Sequence[Any]],
    cps: Sequence[Sequence[Any]] | None,
    anchors: Sequence[Sequence[Any]] | None,
    heads: Sequence[Sequence[Any]] | None,
    keys: Mapping[str, bytes],
    rounds: RoundAudit,
    records: RetentionAudit,
    reference: bool,
    forms: bool = False,
) -> SagaAudit:
    """One saga's audit in :func:`~sagacity.consumers.archive._audit.iter_audits`, from what
    the merge read for it: the bulk verifier's ``verdict`` (or, without it, the saga's
    ``rows``, of ``columns``), its checkpoint rows, its retention anchor row and its recorded
    head row.  With ``forms`` (an archive holding chain forms) the rows end with the form
    columns.  ``archive`` reads the saga's rows again when the bulk verifier refers it."""
    events = len(rows) if verdict is None else verdict.events
    checkpoints = [_checkpoint_of(c) for c in cps or ()]
    anchor = (int(anchors[0][1]), anchors[0][2]) if anchors else None
    recorded_head = (int(heads[0][1]), heads[0][2]) if heads else None
    after_seq, after_hash = anchor if anchor is not None else (0, GENESIS_HASH)
    if anchors and anchors[0][3] in records.failed:
        return _anchor_forged(
            saga,
            events=events,
            anchor=(after_seq, after_hash),
            detail=records.failed[anchors[0][3]],
        )
    if verdict is not None and verdict.refer:
        # A row the bulk verifier cannot judge (a form-2 row among them): the saga's rows,
        # for the paths below.
        rows = archive.saga_rows(saga, forms=forms)
        verdict, events = None, len(rows)
    elif verdict is not None and not verdict.ok:
        return _chain_failed(saga, verdict, events=events)
    head, by_seq = None, None
    if verdict is not None:
        head, by_seq = (verdict.head_seq, verdict.head_hash), verdict.hashes_by_seq()
    elif not reference and not (forms and any(r[12] != 1 for r in rows)):
        # The column check hashes form 1; form 2 is the reference path's.
        head = verified_head(
            [r[:12] for r in rows] if forms else rows, after_seq=after_seq, after_hash=after_hash
        )
    if head is not None:
        return judge_checkpoints(
            saga,
            events=events,
            head_seq=head[0],
            head_hash=head[1],
            by_seq=by_seq if by_seq is not None else {r[1]: r[11] for r in rows},
            checkpoints=checkpoints,
            after_seq=after_seq,
            after_hash=after_hash,
            recorded_head=recorded_head,
            keys=keys,
            rounds=rounds,
        )
    return _judged_by_reference(
        archive,
        saga,
        rows,
        forms=forms,
        checkpoints=checkpoints,
        anchor=anchor,
        recorded_head=recorded_head,
        keys=keys,
        rounds=rounds,
    )


def _anchor_forged(saga: str, *, events: int, anchor: tuple[int, str], detail: str) -> SagaAudit:
    """The audit of a saga whose retention anchor's signed record failed."""
    return SagaAudit(
        saga_id=saga,
        ok=False,
        events=events,
        head_seq=anchor[0],
        head_hash=anchor[1],
        bad_seq=anchor[0],
        reason=AuditReason.FORGED_ANCHOR,
        detail=detail,
    )


def _chain_failed(saga: str, verdict: BatchVerdict, *, events: int) -> SagaAudit:
    """The audit of a saga whose chain the bulk verifier failed (it names the finding)."""
    assert verdict.reason is not None
    return SagaAudit(
        saga_id=saga,
        ok=False,
        events=events,
        head_seq=verdict.head_seq,
        head_hash=verdict.head_hash,
        bad_seq=verdict.bad_seq,
        reason=AuditReason(verdict.reason.value),
        detail=verdict.detail,
    )


def _judged_by_reference(
    archive: SagaRows,
    saga: str,
    rows: Sequence[Sequence[Any]],
    *,
    forms: bool,
    checkpoints: Sequence[Checkpoint],
    anchor: tuple[int, str] | None,
    recorded_head: tuple[int, str] | None,
    keys: Mapping[str, bytes],
    rounds: RoundAudit,
) -> SagaAudit:
    """:func:`judge` over the saga's rows, each rebuilt as a :class:`JournalEntry`; a row
    that is no entry at all is an ``edited`` finding at its seq."""
    after_seq, after_hash = anchor if anchor is not None else (0, GENESIS_HASH)
    entries: list[JournalEntry] = []
    for row in rows:
        try:
            entries.append(archive.entry_of(row, forms=forms))
        except SerializationError as exc:
            # A row that is no entry at all: reported at its seq, after the rows before it
            # (whose own fault, if any, comes first).
            before = verify(entries, saga_id=saga, after_seq=after_seq, after_hash=after_hash)
            if not before.ok:
                earlier = judge(
                    saga,
                    entries,
                    anchor=anchor,
                    recorded_head=recorded_head,
                    keys=keys,
                    rounds=rounds,
                )
                return dataclasses.replace(earlier, events=len(rows))
            return SagaAudit(
                saga_id=saga,
                ok=False,
                events=len(rows),
                head_seq=before.head_seq,
                head_hash=before.head_hash,
                bad_seq=row[1] if isinstance(row[1], int) else None,
                reason=AuditReason.EDITED,
                detail=exc.message,
            )
    return judge(
        saga,
        entries,
        checkpoints=checkpoints,
        anchor=anchor,
        recorded_head=recorded_head,
        keys=keys,
        rounds=rounds,
    )
