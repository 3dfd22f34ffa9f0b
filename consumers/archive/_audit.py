"""Verifying the archive: every saga's chain in stored order, then its signed checkpoints.

One consistent snapshot (REPEATABLE READ, read only) is read in two passes.  First the signing
rounds (:mod:`~sagacity.consumers.archive._roundaudit`) and the signed retention records
(:mod:`~sagacity.consumers.archive._retentionaudit`); only those that fail are remembered.
Then four streams ordered by saga id (the chains' verdicts or rows, checkpoints, retention
anchors, heads) are merged (:mod:`~sagacity.consumers.archive._auditstream`), so memory holds
one saga at a time however large the archive (and, auditing every saga, each saga's retention
anchor: one seq and hash per saga whose start retention removed).  Auditing every saga with
the compiled module, the merge runs there (``sagacity_native.ChainAuditor``): it judges each
saga whose chain, checkpoints and head agree, and hands every other saga, with what was read
for it, to the Python path (:func:`~sagacity.consumers.archive._judging.audit_one`), which
gives every finding.

What is found is said in :mod:`~sagacity.consumers.archive._verdicts`' terms; the rule of a
saga's judgement, and its order of findings, is :mod:`~sagacity.consumers.archive._judging`'s.
A saga that passes records how many of its newest events no checkpoint covers
(:attr:`SagaAudit.unsigned`), a failure only when signatures are required
(:func:`unsigned_as_failure`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sagacity.chain._fastverify import NATIVE, NATIVE_AUDITOR, BatchVerdict
from sagacity.consumers.archive._auditstream import (
    bulk_verdicts,
    fetched,
    grouped,
    merged_by_saga,
    merged_told,
)
from sagacity.consumers.archive._judging import audit_one
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._retentionaudit import audit_retention
from sagacity.consumers.archive._roundaudit import RoundAudit, audit_rounds
from sagacity.consumers.archive._story import read_stories, storied, story_rows
from sagacity.consumers.archive._verdicts import (
    AuditSummary,
    RetentionAudit,
    SagaAudit,
    unsigned_as_failure,
)
from sagacity.ports import ArchiveAudits, ArchiveSchema, AuditSnapshot, ChainBlocks
from sagacity.signing._operator_signature import OperatorVerifier


def trusted_keys(store: ArchiveAudits, pinned: Sequence[bytes] = ()) -> dict[str, bytes]:
    """Keys to verify checkpoints with: ``pinned`` if given, else those the archive recorded.

    Keys read from the database protect only against someone who cannot also write the key
    table; auditors should pin the published key.
    """
    from sagacity.consumers.archive._checkpoints import key_id_of

    if pinned:
        return {key_id_of(k): k for k in pinned}
    return {k: bytes.fromhex(p) for k, p in store.signing_keys()}


@dataclass(frozen=True, kw_only=True)
class _Scope:
    """What one audit run reads: a saga or every saga, at the archive's schema version."""

    saga_id: str | None
    schema: ArchiveSchema
    fetch: int
    keys: Mapping[str, bytes]
    reference: bool

    @property
    def forms(self) -> bool:
        """The archive holds chain forms (its rows end with the form columns)."""
        return self.schema.forms


@dataclass(frozen=True, kw_only=True)
class _JudgeBack:
    """One saga's audit from what the merge read for it (:func:`audit_one`), called with the
    merge's ``(saga, verdict, rows, checkpoints, anchors, heads)``; paired with the saga's rows
    where they were read (a saga the bulk verifier refers to the reference path, or the column
    check's), which its story is then told from."""

    snapshot: AuditSnapshot
    scope: _Scope
    rounds: RoundAudit
    records: RetentionAudit

    def __call__(
        self,
        saga: str,
        verdict: BatchVerdict | None,
        rows: Sequence[Sequence[Any]],
        cps: Sequence[Sequence[Any]] | None,
        anchors: Sequence[Sequence[Any]] | None,
        heads: Sequence[Sequence[Any]] | None,
    ) -> tuple[SagaAudit, Sequence[Sequence[Any]] | None]:
        if verdict is not None and verdict.refer:
            # A row the bulk verifier cannot judge (a form-2 row among them): the saga's rows,
            # for the paths of audit_one and for its story.
            rows = self.snapshot.saga_rows.saga_rows(saga, forms=self.scope.forms)
            verdict = None
        audit = audit_one(
            self.snapshot.saga_rows,
            saga,
            verdict=verdict,
            rows=rows,
            cps=cps,
            anchors=anchors,
            heads=heads,
            keys=self.scope.keys,
            rounds=self.rounds,
            records=self.records,
            reference=self.scope.reference,
            forms=self.scope.forms,
        )
        return audit, rows if verdict is None else None


@dataclass(frozen=True, kw_only=True)
class _Run:
    """One audit run inside its snapshot transaction; its cursors, streams and second
    connections are closed by ``cursors`` (the last opened first)."""

    snapshot: AuditSnapshot
    cursors: contextlib.ExitStack
    scope: _Scope

    def checked_rounds(self, known_rounds: Mapping[int, str] | None) -> RoundAudit:
        """The signing rounds' audit (none held: every known round is missing)."""
        if self.scope.schema.rounds:
            return audit_rounds(
                self.snapshot.round_streams,
                self.snapshot.round_log,
                saga_id=self.scope.saga_id,
                keys=self.scope.keys,
                fetch=self.scope.fetch,
                known=known_rounds or {},
                version=self.scope.schema.version,
            )
        return RoundAudit(
            failed={
                n: (AuditReason.TRUNCATED, f"round {n}: the archive holds no signing rounds")
                for n in (known_rounds or {})
            }
        )

    def checked_records(self) -> RetentionAudit:
        """The signed retention records' audit."""
        if not self.scope.schema.signed_records:
            return RetentionAudit()
        scope = self.scope
        return audit_retention(
            self.snapshot.retention,
            saga_id=scope.saga_id,
            keys=scope.keys,
            fetch=scope.fetch,
        )

    def audits(
        self,
        *,
        bulk: bool,
        rounds: RoundAudit | None,
        known_rounds: Mapping[int, str] | None,
        retention: RetentionAudit | None,
        allow_unopened: bool,
        operator: OperatorVerifier | None,
    ) -> Iterator[SagaAudit]:
        """Every saga's audit (see :func:`iter_audits`)."""
        # The second reader is made, and the store sorts the rows for the stream, while the
        # rounds are audited below.
        stream = self.snapshot.chain_blocks() if bulk else None
        checked_rounds = self.checked_rounds(known_rounds)
        if rounds is not None:
            rounds.rounds += checked_rounds.rounds
            rounds.failed.update(checked_rounds.failed)
            rounds.latest = checked_rounds.latest
            rounds.last = checked_rounds.last
        checked_records = self.checked_records()
        if retention is not None:
            retention.records += checked_records.records
            retention.failed.update(checked_records.failed)
        judge = _JudgeBack(
            snapshot=self.snapshot, scope=self.scope, rounds=checked_rounds, records=checked_records
        )
        streamed = stream if stream is not None and stream.connected() else None
        # One read of the rows: each saga's story is told from the rows its chain was walked
        # on (or, compiled, found clean on them); only a saga whose rows were not kept is read
        # again, alone.
        for audit, rows in self.chain_audits(streamed, judge):
            if not audit.ok or (rows is not None and not rows):
                yield audit
                continue
            told = story_rows(rows) if rows is not None else self.story_of(audit.saga_id)
            story = next(read_stories(told, operator=operator), None)
            yield storied(audit, story, allow_unopened=allow_unopened)

    def story_of(self, saga: str) -> list[tuple[Any, ...]]:
        """One saga's story rows, read in the audit's snapshot: a saga whose rows the chain
        walk did not keep and whose story the compiled grammar did not find clean."""
        return self.snapshot.story_rows(saga)

    def chain_audits(
        self, stream: ChainBlocks | None, judge: _JudgeBack
    ) -> Iterator[tuple[SagaAudit, Sequence[Sequence[Any]] | None]]:
        """Every saga's audit but its story, with the rows its story is told from (``None``:
        to be read): from the rows ``stream`` (bulk), or the rows read on the audit's own
        connection."""
        streams: list[Iterator[tuple[str, Any]]] = []
        if stream is not None:
            anchor_rows = {str(r[0]): r for r in self.snapshot.anchor_rows()}
            anchors_of = {k: (int(r[1]), str(r[2])) for k, r in anchor_rows.items()}
            if NATIVE_AUDITOR is not None and NATIVE:
                yield from self.compiled(stream, anchor_rows, anchors_of, judge)
                return
            # The Python twin: the same blocks, verified and decoded for the stories.
            checked, told = itertools.tee(stream)
            verdicts = bulk_verdicts(checked, anchors=anchors_of)
            self.cursors.enter_context(contextlib.closing(verdicts))  # before the reader closes
            streams += [verdicts, grouped(self.snapshot.decoded(told))]
        for i in range(4):
            if i == 0 and stream is not None:
                continue
            streams.append(grouped(fetched(self.snapshot.batches(i), self.scope.fetch)))
        for saga, parts in merged_by_saga(streams):
            if stream is not None:
                chain, rows, cps, anchors, heads = parts
                audit, read = judge(saga, chain, [], cps, anchors, heads)
                yield audit, read if read is not None else (rows or [])
            else:
                chain, cps, anchors, heads = parts
                yield judge(saga, None, chain or [], cps, anchors, heads)

    def compiled(
        self,
        stream: ChainBlocks,
        anchor_rows: Mapping[str, Sequence[Any]],
        anchors_of: Mapping[str, tuple[int, str]],
        judge: _JudgeBack,
    ) -> Iterator[tuple[SagaAudit, Sequence[Sequence[Any]] | None]]:
        """Every saga's audit but its story by the compiled merge (:func:`merged_audits`), with
        what its story is told from (the compiled grammar ran on the same rows)."""
        assert NATIVE_AUDITOR is not None
        named = [self.snapshot.batches(i) for i in (1, 3)]
        failed_records = judge.records.failed
        merged = merged_told(
            NATIVE_AUDITOR(
                anchors=anchors_of,
                failed_rounds=set(judge.rounds.failed),
                refer={k for k, r in anchor_rows.items() if r[3] in failed_records},
                stories=True,
            ),
            stream,
            checkpoints=named[0],
            heads=named[1],
            fetch=self.scope.fetch,
            anchors=anchors_of,
            anchor_rows=anchor_rows,
            judge_back=judge,
        )
        self.cursors.enter_context(contextlib.closing(merged))  # before the reader closes
        for item, clean in merged:
            if isinstance(item, SagaAudit):  # judged by the compiled merge, its story clean
                yield item, ()
                continue
            audit, rows = item
            # No rows kept: a clean story needs none, any other is read again.
            yield audit, rows if rows is not None else (() if clean else None)


def iter_audits(
    store: ArchiveAudits,
    *,
    saga_id: str | None = None,
    pinned_keys: Sequence[bytes] = (),
    fetch: int = 5_000,
    reference: bool = False,
    bulk: bool | None = None,
    rounds: RoundAudit | None = None,
    known_rounds: Mapping[int, str] | None = None,
    retention: RetentionAudit | None = None,
    allow_unopened: bool = False,
    operator: OperatorVerifier | None = None,
) -> Iterator[SagaAudit]:
    """Audit one saga, or every saga of the archive in saga id order.

    A saga's chain is first checked without rebuilding its entries; one that does not pass
    that way (or ``reference=True``: every saga) is judged by the reference path, each row
    rebuilt as a :class:`JournalEntry` and verified by :func:`sagacity.chain.verify`, which
    gives every finding.  Every path gives the same audits; tests compare them.

    When every saga is audited, the rows go by binary ``COPY`` into the bulk verifier
    (:mod:`~sagacity.chain._fastverify`), on a second connection reading the same
    snapshot (a connection streaming a ``COPY`` can run nothing else; the stream starts, and
    the server sorts its rows, while the rounds are checked); a saga it cannot judge (a row
    that is not a valid entry) goes to the reference path.  With the compiled module the merge
    with checkpoints and heads runs there too (:func:`merged_audits`).  Otherwise each saga's
    rows are checked straight from their columns.

    ``rounds``, when given, receives the audit of the signing rounds (checked first, in the
    same snapshot): a round that fails fails every checkpoint of it, and one whose
    checkpoints were all removed is reported only there.  ``known_rounds`` (id: root, as
    published earlier from :attr:`RoundAudit.latest`) must still be in the archive with those
    roots; checked when auditing every saga.  ``retention``, when given, receives the audit
    of the signed retention records.

    A saga whose chain, checkpoints and head pass is then judged by what its chain says
    (:mod:`~sagacity.consumers.archive._story`): an impossible event of the saga grammar
    (``grammar:*``), then data withheld (``withheld``) unless ``allow_unopened``; read on the
    rows the chain was walked on (compiled: by the grammar's twin, beside the chain check).

    Args:
        allow_unopened: the archive is known to store sealed events' commitments only (it
            ingests without the key-encryption key): a missing opening is not ``withheld``.
        operator: the pinned operator keys: an ``ERASED`` counts only when one of them signed
            it (else ``forged_erasure``); ``None``: one with an operator signature counts
            unverified (:func:`sagacity.privacy._withheld.erasure_verdict`).
        bulk: ``True`` the bulk verifier (compiled where installed, else its Python twin),
            ``False`` the column check; by default the bulk verifier when every saga is
            audited and the compiled module is installed (:data:`_fastverify.NATIVE`).  Where
            the snapshot cannot be shared with a second connection, the column check runs.

    Raises:
        ValueError: ``known_rounds`` with a ``saga_id``.
        ArchiveSchemaError: the connection does not reach an archive.
        PersistenceError: the database failed.
    """
    if known_rounds and saga_id is not None:
        raise ValueError("known rounds are checked when every saga is audited, not one")
    if bulk is None:
        bulk = NATIVE and saga_id is None
    schema = store.schema()
    keys = trusted_keys(store, pinned_keys)
    scope = _Scope(saga_id=saga_id, schema=schema, fetch=fetch, keys=keys, reference=reference)
    with (
        store.audit_snapshot(saga_id=saga_id, fetch=fetch, version=schema.version) as snapshot,
        contextlib.ExitStack() as cursors,
    ):
        yield from _Run(snapshot=snapshot, cursors=cursors, scope=scope).audits(
            bulk=bulk and not reference,
            rounds=rounds,
            known_rounds=known_rounds,
            retention=retention,
            allow_unopened=allow_unopened,
            operator=operator,
        )


def audit(
    store: ArchiveAudits,
    *,
    saga_id: str | None = None,
    pinned_keys: Sequence[bytes] = (),
    progress: Callable[[SagaAudit], None] | None = None,
    reference: bool = False,
    known_rounds: Mapping[int, str] | None = None,
    require_signed: bool = False,
    allow_unopened: bool = False,
    operator: OperatorVerifier | None = None,
) -> AuditSummary:
    """Run :func:`iter_audits` to the end and total it.

    With ``pinned_keys``, a run in which no checkpoint verified fails (:attr:`AuditSummary.
    nothing_signed`); with ``require_signed``, so does every saga whose newest events no
    checkpoint covers (``unsigned``, :func:`unsigned_as_failure`).
    """
    started = time.perf_counter()
    summary = AuditSummary(pinned=bool(pinned_keys))
    for result in iter_audits(
        store,
        saga_id=saga_id,
        pinned_keys=pinned_keys,
        reference=reference,
        rounds=summary.rounds,
        known_rounds=known_rounds,
        retention=summary.retention,
        allow_unopened=allow_unopened,
        operator=operator,
    ):
        if require_signed:
            result = unsigned_as_failure(result)
        summary.add(result)
        if progress is not None:
            progress(result)
    summary.seconds = time.perf_counter() - started
    return summary
