"""Verifying the archive: every saga's chain in stored order, then its signed checkpoints.

One consistent snapshot (REPEATABLE READ, read only) is read as four streams ordered by saga
id (rows, checkpoints, retention anchors, heads) and merged, so memory holds one saga at a
time however large the archive.
"""

from __future__ import annotations

import contextlib
import enum
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from sagacity._events import GENESIS_HASH, JournalEntry, event_type_of
from sagacity.chain import BreakReason, verify
from sagacity.consumers.archive._checkpoints import Checkpoint, signature_valid
from sagacity.consumers.archive._db import check_schema, mapped_errors
from sagacity.errors import SerializationError


class AuditReason(enum.StrEnum):
    """Why a saga fails the audit: a chain break (docs/adr/0002) or a checkpoint finding."""

    WRONG_GENESIS = BreakReason.WRONG_GENESIS.value
    GAP = BreakReason.GAP.value
    REORDERED = BreakReason.REORDERED.value
    BROKEN_LINK = BreakReason.BROKEN_LINK.value
    EDITED = BreakReason.EDITED.value
    FOREIGN_SAGA = BreakReason.FOREIGN_SAGA.value
    TRUNCATED = "truncated"
    """The archive ends below a signed checkpoint (or below its own recorded head)."""
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    """A signed checkpoint's hash differs from the archived entry at that seq: rewritten."""
    BAD_SIGNATURE = "bad_signature"
    """A checkpoint's signature does not verify: the checkpoint was altered or forged."""
    UNKNOWN_KEY = "unknown_key"
    """A checkpoint is signed by a key that is not trusted."""


@dataclass(frozen=True, kw_only=True)
class SagaAudit:
    """The audit of one saga."""

    saga_id: str
    ok: bool
    events: int
    head_seq: int
    head_hash: str
    checkpoints: int = 0
    bad_seq: int | None = None
    reason: AuditReason | None = None
    detail: str | None = None


@dataclass(kw_only=True)
class AuditSummary:
    """Totals over an audit run."""

    sagas: int = 0
    ok: int = 0
    events: int = 0
    checkpoints: int = 0
    by_reason: dict[AuditReason, int] = field(default_factory=dict)
    failures: list[SagaAudit] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, audit: SagaAudit, *, keep_failures: int = 100) -> None:
        """Count one saga's audit."""
        self.sagas += 1
        self.events += audit.events
        self.checkpoints += audit.checkpoints
        if audit.ok:
            self.ok += 1
        else:
            assert audit.reason is not None
            self.by_reason[audit.reason] = self.by_reason.get(audit.reason, 0) + 1
            if len(self.failures) < keep_failures:
                self.failures.append(audit)


_ROW_COLUMNS = (
    "saga_id, seq, event_type, tool, payload, result, error, actor, attributes::text,"
    " recorded_at_us, prev_hash, hash"
)


def _entry(row: Sequence[Any]) -> JournalEntry:
    try:
        return JournalEntry(
            saga_id=row[0],
            seq=row[1],
            event_type=event_type_of(row[2]),
            tool=row[3],
            payload=row[4],
            result=row[5],
            error=row[6],
            actor=row[7],
            attributes=json.loads(row[8]) if row[8] != "{}" else {},
            recorded_at_us=row[9],
            prev_hash=row[10],
            hash=row[11],
        )
    except (ValueError, TypeError) as exc:
        raise SerializationError(f"archived row {row[0]!r}/{row[1]} is malformed: {exc}") from exc


def judge(
    saga_id: str,
    entries: Sequence[JournalEntry],
    *,
    checkpoints: Sequence[Checkpoint] = (),
    anchor: tuple[int, str] | None = None,
    recorded_head: int | None = None,
    keys: Mapping[str, bytes],
) -> SagaAudit:
    """Audit one saga from its archived entries (stored order) and its checkpoints.

    Args:
        entries: the saga's entries in the order they were archived.
        checkpoints: the saga's signed checkpoints.
        anchor: the last (seq, hash) removed by retention, if the saga's start was dropped.
        recorded_head: the head seq the archive's head table records (unsigned).
        keys: trusted public keys by key id.
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
    head_seq, head_hash = verdict.head_seq, verdict.head_hash
    by_seq = {e.seq: e.hash for e in entries}

    def failed(seq: int, reason: AuditReason, detail: str, checked: int) -> SagaAudit:
        return SagaAudit(
            ok=False,
            head_seq=head_seq,
            head_hash=head_hash,
            checkpoints=checked,
            bad_seq=seq,
            reason=reason,
            detail=detail,
            **base,  # type: ignore[arg-type]
        )

    checked = 0
    for cp in sorted(checkpoints, key=lambda c: (c.seq, c.signed_at_us)):
        public = keys.get(cp.key_id)
        if public is None:
            return failed(
                cp.seq, AuditReason.UNKNOWN_KEY, f"signed by untrusted key {cp.key_id}", checked
            )
        if not signature_valid(public, cp):
            return failed(
                cp.seq, AuditReason.BAD_SIGNATURE, "checkpoint signature does not verify", checked
            )
        checked += 1
        if cp.seq < after_seq:
            continue  # removed by retention; nothing left to compare with
        expected = after_hash if cp.seq == after_seq else by_seq.get(cp.seq)
        if cp.seq > head_seq:
            return failed(
                head_seq + 1,
                AuditReason.TRUNCATED,
                f"a checkpoint signed seq {cp.seq} but the archive ends at seq {head_seq}",
                checked,
            )
        if expected != cp.hash:
            return failed(
                cp.seq,
                AuditReason.CHECKPOINT_MISMATCH,
                f"seq {cp.seq} was signed with hash {cp.hash[:16]}…, archive has "
                f"{(expected or '?')[:16]}…",
                checked,
            )
    if recorded_head is not None and recorded_head > head_seq:
        return failed(
            head_seq + 1,
            AuditReason.TRUNCATED,
            f"the archive recorded head seq {recorded_head} but ends at seq {head_seq}",
            checked,
        )
    return SagaAudit(
        ok=True,
        head_seq=head_seq,
        head_hash=head_hash,
        checkpoints=checked,
        **base,  # type: ignore[arg-type]
    )


def trusted_keys(conn: psycopg.Connection, pinned: Sequence[bytes] = ()) -> dict[str, bytes]:
    """Keys to verify checkpoints with: ``pinned`` if given, else those the archive recorded.

    Keys read from the database protect only against someone who cannot also write the key
    table; auditors should pin the published key.
    """
    from sagacity.consumers.archive._checkpoints import key_id_of

    if pinned:
        return {key_id_of(k): k for k in pinned}
    with mapped_errors("read signing keys"):
        rows = conn.execute("SELECT key_id, public_key FROM archive_signing_key").fetchall()
    return {str(k): bytes.fromhex(p) for k, p in rows}


def _grouped(cursor: Iterator[Sequence[Any]]) -> Iterator[tuple[str, list[Sequence[Any]]]]:
    current: str | None = None
    group: list[Sequence[Any]] = []
    for row in cursor:
        if row[0] != current:
            if current is not None:
                yield current, group
            current, group = row[0], []
        group.append(row)
    if current is not None:
        yield current, group


def iter_audits(
    conn: psycopg.Connection,
    *,
    saga_id: str | None = None,
    pinned_keys: Sequence[bytes] = (),
    fetch: int = 5_000,
) -> Iterator[SagaAudit]:
    """Audit one saga, or every saga of the archive in saga id order.

    Raises:
        ArchiveSchemaError: the connection does not reach an archive.
        PersistenceError: the database failed.
    """
    check_schema(conn)
    keys = trusted_keys(conn, pinned_keys)
    where = "WHERE saga_id = %(s)s" if saga_id is not None else ""
    order = 'ORDER BY saga_id COLLATE "C"'
    # Only constant fragments are interpolated; the saga id is a bound parameter.
    queries = (
        f"SELECT {_ROW_COLUMNS} FROM side_effect_journal {where} {order}, archive_id",  # noqa: S608
        f"SELECT saga_id, seq, hash, signed_at_us, key_id, signature FROM archive_checkpoint"  # noqa: S608
        f" {where} {order}",
        f"SELECT saga_id, max(seq), (array_agg(hash ORDER BY seq DESC))[1]"  # noqa: S608
        f" FROM archive_retention_anchor {where} GROUP BY saga_id {order}",
        f"SELECT saga_id, head_seq FROM archive_saga_head {where} {order}",  # noqa: S608
    )
    if not conn.autocommit:
        conn.rollback()  # the snapshot transaction below must be the first statement's
    with (
        mapped_errors("audit the archive"),
        conn.transaction(),
        contextlib.ExitStack() as cursors,
    ):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        streams: list[Iterator[tuple[str, list[Sequence[Any]]]]] = []
        for i, query in enumerate(queries):
            cur = cursors.enter_context(conn.cursor(name=f"sgc_audit_{i}"))
            cur.itersize = fetch
            cur.execute(query, {"s": saga_id})
            streams.append(_grouped(iter(cur)))
        current: list[tuple[str, list[Sequence[Any]]] | None] = [next(s, None) for s in streams]
        while any(c is not None for c in current):
            saga = min(c[0] for c in current if c is not None)
            parts: list[list[Sequence[Any]]] = []
            for i, c in enumerate(current):
                if c is not None and c[0] == saga:
                    parts.append(c[1])
                    current[i] = next(streams[i], None)
                else:
                    parts.append([])
            rows, cps, anchors, heads = parts
            try:
                entries = [_entry(r) for r in rows]
            except SerializationError as exc:
                yield SagaAudit(
                    saga_id=saga,
                    ok=False,
                    events=len(rows),
                    head_seq=0,
                    head_hash=GENESIS_HASH,
                    bad_seq=None,
                    reason=AuditReason.EDITED,
                    detail=exc.message,
                )
                continue
            yield judge(
                saga,
                entries,
                checkpoints=[
                    Checkpoint(
                        saga_id=c[0],
                        seq=int(c[1]),
                        hash=c[2],
                        signed_at_us=int(c[3]),
                        key_id=c[4],
                        signature=c[5],
                    )
                    for c in cps
                ],
                anchor=(int(anchors[0][1]), anchors[0][2]) if anchors else None,
                recorded_head=int(heads[0][1]) if heads else None,
                keys=keys,
            )


def audit(
    conn: psycopg.Connection,
    *,
    saga_id: str | None = None,
    pinned_keys: Sequence[bytes] = (),
    progress: Callable[[SagaAudit], None] | None = None,
) -> AuditSummary:
    """Run :func:`iter_audits` to the end and total it."""
    started = time.perf_counter()
    summary = AuditSummary()
    for result in iter_audits(conn, saga_id=saga_id, pinned_keys=pinned_keys):
        summary.add(result)
        if progress is not None:
            progress(result)
    summary.seconds = time.perf_counter() - started
    return summary
