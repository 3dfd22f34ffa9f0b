"""Verifying the archive: every saga's chain in stored order, then its signed checkpoints.

One consistent snapshot (REPEATABLE READ, read only) is read in two passes.  First the signing
rounds (:mod:`~sagacity.consumers.archive._roundaudit`) and the signed retention records;
only those that fail are remembered.  Then four streams ordered by saga id (the chains'
verdicts or rows, checkpoints, retention anchors, heads) are merged, so memory holds one
saga at a time however large the archive (and, auditing every saga, each saga's retention
anchor: one seq and hash per saga whose start retention removed).  Auditing every saga with
the compiled module, the merge runs there (``sagacity_native.ChainAuditor``): it judges each
saga whose chain, checkpoints and head agree, and hands every other saga, with what was read
for it, to the Python path here (:func:`_audit_one`), which gives every finding.

Per saga the first finding wins, in this order (docs/adr/0017-audit-coverage.md): the chain over
every archived row; each checkpoint (its round or signature, then its seq and hash against the
chain); the head the archiver recorded (``truncated``, ``beyond_head``, ``head_mismatch``).  A
saga that passes records how many of its newest events no checkpoint covers
(:attr:`SagaAudit.unsigned`), a failure only when signatures are required
(:func:`unsigned_as_failure`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from sagacity._events import GENESIS_HASH, JournalEntry
from sagacity._operator_signature import OperatorVerifier
from sagacity.chain import canonical_bytes_of, verify
from sagacity.consumers.archive._chainstream import chain_rows
from sagacity.consumers.archive._checkpoints import (
    Checkpoint,
    bytes_signature_valid,
    signature_valid,
)
from sagacity.consumers.archive._db import check_schema, mapped_errors
from sagacity.consumers.archive._fastverify import (
    NATIVE,
    NATIVE_AUDITOR,
    BatchVerdict,
    batch_verdict,
    chain_verifier,
)
from sagacity.consumers.archive._merkle import RootBuilder
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._retention import (
    NO_ANCHORS_ROOT,
    RECORD_COLUMNS,
    anchor_leaf,
    record_of_row,
)
from sagacity.consumers.archive._roundaudit import RoundAudit, audit_rounds
from sagacity.consumers.archive._rows import FORM_COLUMNS, ROW_COLUMNS, entry_of_row
from sagacity.consumers.archive._schema import (
    FORMS_VERSION,
    LOG_VERSION,
    ROUNDS_VERSION,
    checkpoint_round_columns,
)
from sagacity.consumers.archive._snapshots import Prefetched, reader_of, shared_snapshot
from sagacity.consumers.archive._story import SagaStory, read_stories, story_query, with_stories
from sagacity.errors import SerializationError


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
    signed_seq: int = 0
    """The highest seq a verified checkpoint covers (0: none)."""
    unsigned: int = 0
    """How many of the saga's newest archived events no checkpoint covers (0 for a saga that
    failed: its coverage means nothing)."""
    writer: str | None = None
    """For a finding on what the chain says (``grammar:*``): the ``writer`` attribute of the
    offending event, when it names one."""
    story: SagaStory | None = field(default=None, compare=False, repr=False)
    """What the saga's chain says (:mod:`~sagacity.consumers.archive._story`), for a saga
    whose chain, checkpoints and head passed and whose story fails it or counts an erasure
    (``None`` otherwise)."""


@dataclass(kw_only=True)
class RetentionAudit:
    """The signed retention records an audit checked (docs/adr/0015-round-log.md), and the
    findings of those that failed, by partition name: every anchor of a failed record fails
    its saga (``forged_anchor``)."""

    records: int = 0
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class AuditSummary:
    """Totals over an audit run.  ``rounds.failed`` may name a round no saga's checkpoint
    points at any more (all its rows deleted): the run failed then too (:attr:`all_ok`)."""

    sagas: int = 0
    ok: int = 0
    events: int = 0
    checkpoints: int = 0
    by_reason: dict[AuditReason, int] = field(default_factory=dict)
    failures: list[SagaAudit] = field(default_factory=list)
    rounds: RoundAudit = field(default_factory=RoundAudit)
    retention: RetentionAudit = field(default_factory=RetentionAudit)
    seconds: float = 0.0
    unsigned_sagas: int = 0
    """Sagas with archived events and no checkpoint at all."""
    unsigned_tails: int = 0
    """Sagas with checkpoints whose newest events no checkpoint covers."""
    unsigned_events: int = 0
    """Events of those sagas no checkpoint covers."""
    unsigned: list[SagaAudit] = field(default_factory=list)
    """The first of the sagas that passed with events no checkpoint covers (as many as
    failures are kept)."""
    pinned: bool = False
    """The keys were pinned by the auditor: then nothing signed is a failure
    (:attr:`nothing_signed`), since a pinned key asserts there is signed evidence."""
    erased_sagas: set[str] = field(default_factory=set)
    """Sagas whose accepted chain counts an erasure (an ``ERASED`` event)."""
    erased_fields: int = 0
    """The data fields those erasures list."""
    erasures_unverified: int = 0
    """Erasures counted without an operator key to verify their signature (none was pinned:
    docs/adr/0027-operator-signatures.md)."""

    @property
    def nothing_signed(self) -> bool:
        """Keys were pinned but no checkpoint verified under them."""
        return self.pinned and self.checkpoints == 0

    @property
    def all_ok(self) -> bool:
        """Every saga, every signing round and every retention record verified, and with
        pinned keys something was signed by them."""
        return (
            self.ok == self.sagas
            and not self.rounds.failed
            and not self.retention.failed
            and not self.nothing_signed
        )

    def add(self, audit: SagaAudit, *, keep_failures: int = 100) -> None:
        """Count one saga's audit."""
        self.sagas += 1
        self.events += audit.events
        if audit.story is not None and audit.story.erased:
            self.erased_sagas.add(audit.saga_id)
            self.erased_fields += audit.story.data.erased_fields
            self.erasures_unverified += audit.story.data.unverified
        self.checkpoints += audit.checkpoints
        if audit.unsigned:
            self.unsigned_events += audit.unsigned
            if audit.signed_seq:
                self.unsigned_tails += 1
            else:
                self.unsigned_sagas += 1
            if audit.ok and len(self.unsigned) < keep_failures:
                self.unsigned.append(audit)
        if audit.ok:
            self.ok += 1
        else:
            assert audit.reason is not None
            self.by_reason[audit.reason] = self.by_reason.get(audit.reason, 0) + 1
            if len(self.failures) < keep_failures:
                self.failures.append(audit)


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
    return _judge_checkpoints(
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


def _judge_checkpoints(
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
    base = {"saga_id": saga_id, "events": events}

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
        if cp.round_id is not None:
            finding = (
                (AuditReason.BAD_SIGNATURE, f"round {cp.round_id} was not verified")
                if rounds is None
                else rounds.failed.get(cp.round_id)
            )
            if finding is not None:
                return failed(cp.seq, finding[0], finding[1], checked)
        else:
            public = keys.get(cp.key_id)
            if public is None:
                return failed(
                    cp.seq, AuditReason.UNKNOWN_KEY, f"signed by untrusted key {cp.key_id}", checked
                )
            if not signature_valid(public, cp):
                return failed(
                    cp.seq,
                    AuditReason.BAD_SIGNATURE,
                    "checkpoint signature does not verify",
                    checked,
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
        head_seq=head_seq,
        head_hash=head_hash,
        checkpoints=checked,
        signed_seq=signed_seq,
        unsigned=max(head_seq - max(signed_seq, after_seq), 0),
        **base,  # type: ignore[arg-type]
    )


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


def unsigned_as_failure(audit: SagaAudit) -> SagaAudit:
    """``audit`` failed (``unsigned``) when it passed but no checkpoint covers its newest
    events; any other audit unchanged."""
    if not audit.ok or not audit.unsigned:
        return audit
    first = audit.head_seq - audit.unsigned + 1
    what = (
        f"seqs {first}..{audit.head_seq} follow the last checkpoint (seq {audit.signed_seq})"
        if audit.signed_seq
        else f"no checkpoint covers any of seqs {first}..{audit.head_seq}"
    )
    return dataclasses.replace(
        audit, ok=False, bad_seq=first, reason=AuditReason.UNSIGNED, detail=what
    )


def _verified_head(
    rows: Sequence[Sequence[Any]], *, after_seq: int, after_hash: str
) -> tuple[int, str] | None:
    """The head (seq, hash) of one saga's archived rows if they verify, hashed from the
    columns; ``None`` for anything else, which the caller then judges by the reference path.

    Agrees with building every row's :class:`JournalEntry` and running
    :func:`sagacity.chain.verify`: it accepts only rows that path would accept as valid
    entries and whose chain it would pass (seq by seq from ``after_seq``, each previous hash
    the one before, each hash recomputed over the same canonical bytes).  It never explains a
    failure: every reason, bad seq and detail comes from the reference path.
    """
    if after_seq == 0 and after_hash != GENESIS_HASH:
        return None  # the reference reports a wrong genesis here
    try:
        prev_digest = bytes.fromhex(after_hash)
    except ValueError:
        return None
    if len(prev_digest) != 32 or not rows:
        return None
    saga_id = rows[0][0]
    if type(saga_id) is not str or not saga_id:
        return None
    prev = after_hash
    expected = after_seq + 1
    canonical = canonical_bytes_of
    sha256 = hashlib.sha256
    loads = json.loads
    try:
        for row in rows:
            (
                saga,
                seq,
                event_type,
                tool,
                payload,
                result,
                error,
                actor,
                attributes_text,
                recorded_at_us,
                prev_hash,
                recorded_hash,
            ) = row
            if (
                seq != expected
                or prev_hash != prev
                or saga != saga_id
                or type(seq) is not int
                or type(recorded_at_us) is not int
                or type(event_type) is not str
                or not event_type
                # The text rules (no U+0000; None formats as "None"): the columns cannot hold
                # it, but a row that did would not be an entry.
                or "\x00" in f"{saga}{event_type}{tool}{payload}{result}{error}{actor}"
            ):
                return None
            if attributes_text == "{}":
                attributes = None
            else:
                # A false positive (an escaped backslash before "u0000") only falls back.
                if type(attributes_text) is not str or "\\u0000" in attributes_text:
                    return None
                attributes = loads(attributes_text)
                if type(attributes) is not dict:
                    return None
            # Non-text values fail to encode (AttributeError), lone surrogates too.
            digest = sha256(
                prev_digest
                + canonical(
                    saga,
                    seq,
                    event_type,
                    tool,
                    payload,
                    result,
                    error,
                    actor,
                    recorded_at_us,
                    attributes,
                )
            ).digest()
            if digest.hex() != recorded_hash:
                return None
            prev_digest = digest
            prev = recorded_hash
            expected += 1
    except Exception:  # anything odd is the reference path's to explain
        return None
    return expected - 1, prev


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


def _fetched(cursor: psycopg.ServerCursor[Any], size: int) -> Iterator[Sequence[Any]]:
    """The rows of a named cursor, ``size`` a fetch (one call per fetch, not per row)."""
    while rows := cursor.fetchmany(size):
        yield from rows


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


def _judge_record(
    name: str,
    row: Sequence[Any] | None,
    *,
    anchors: int,
    root: str,
    problem: str | None,
    keys: Mapping[str, bytes],
) -> str | None:
    """The finding on one retention record (``None``: verified)."""
    if row is None:
        return f"anchors name retention record {name!r}, which the archive does not hold"
    record = record_of_row(row)
    if record is None:
        return (
            f"the retention record of {name!r} is not signed (sign records of months dropped "
            "before records were signed with `sagacity archive retention --sign-records`)"
        )
    public = keys.get(record.key_id)
    if public is None:
        return f"the retention record of {name!r} is signed by untrusted key {record.key_id}"
    if not bytes_signature_valid(public, record.message(), record.signature):
        return f"the signature of the retention record of {name!r} does not verify"
    if problem is not None:
        return f"retention record {name!r}: {problem}"
    if (anchors, root) != (record.anchor_count, record.anchors_root):
        return (
            f"the anchors of {name!r} do not hash to its signed root ({record.anchor_count} "
            f"signed, {anchors} held): an anchor was added, removed or changed"
        )
    return None


def _audit_retention(
    conn: psycopg.Connection,
    *,
    saga_id: str | None,
    keys: Mapping[str, bytes],
    fetch: int,
) -> RetentionAudit:
    """Check every signed retention record (or those of one saga's anchors) against its
    anchors, streamed in leaf order, inside the caller's snapshot."""
    audit = RetentionAudit()
    scope = (
        " WHERE partition_name IN (SELECT partition_name FROM archive_retention_anchor"
        " WHERE saga_id = %(s)s)"
        if saga_id is not None
        else ""
    )
    with (
        conn.cursor(name="sgc_audit_records") as record_cur,
        conn.cursor(name="sgc_audit_anchors") as anchor_cur,
    ):
        record_cur.itersize = anchor_cur.itersize = fetch
        record_cur.execute(
            f"SELECT {RECORD_COLUMNS} FROM archive_retention{scope}"  # noqa: S608
            ' ORDER BY partition_name COLLATE "C"',
            {"s": saga_id},
        )
        anchor_cur.execute(
            "SELECT partition_name, leaf_index, saga_id, seq, hash"  # noqa: S608
            f' FROM archive_retention_anchor{scope} ORDER BY partition_name COLLATE "C",'
            " leaf_index",
            {"s": saga_id},
        )
        records, anchors = iter(record_cur), iter(anchor_cur)
        row, anchor = next(records, None), next(anchors, None)
        while row is not None or anchor is not None:
            name = min(str(r[0]) for r in (row, anchor) if r is not None)
            held = None
            if row is not None and row[0] == name:
                held, row = row, next(records, None)
            builder, count, problem = RootBuilder(), 0, None
            while anchor is not None and anchor[0] == name:
                if problem is None and anchor[1] != count:
                    problem = f"anchor {count} is missing or out of place"
                builder.add(anchor_leaf(saga_id=anchor[2], seq=int(anchor[3]), hash=anchor[4]))
                count += 1
                anchor = next(anchors, None)
            root = builder.root()
            audit.records += 1
            finding = _judge_record(
                name,
                held,
                anchors=count,
                root=root.hex() if root is not None else NO_ANCHORS_ROOT,
                problem=problem,
                keys=keys,
            )
            if finding is not None:
                audit.failed[name] = finding
    return audit


def iter_audits(
    conn: psycopg.Connection,
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
    (:mod:`~sagacity.consumers.archive._fastverify`), on a second connection reading the same
    snapshot (a connection streaming a ``COPY`` can run nothing else; the stream starts, and
    the server sorts its rows, while the rounds are checked); a saga it cannot judge (a row
    that is not a valid entry) goes to the reference path.  With the compiled module the merge
    with checkpoints and heads runs there too (:func:`_merged_audits`).  Otherwise each saga's
    rows are checked straight from their columns.

    ``rounds``, when given, receives the audit of the signing rounds (checked first, in the
    same snapshot): a round that fails fails every checkpoint of it, and one whose
    checkpoints were all removed is reported only there.  ``known_rounds`` (id: root, as
    published earlier from :attr:`RoundAudit.latest`) must still be in the archive with those
    roots; checked when auditing every saga.

    A saga whose chain, checkpoints and head pass is then judged by what its chain says
    (:mod:`~sagacity.consumers.archive._story`): an impossible event of the saga grammar
    (``grammar:*``), then data withheld (``withheld``) unless ``allow_unopened``.

    Args:
        allow_unopened: the archive is known to store sealed events' commitments only (it
            ingests without the key-encryption key): a missing opening is not ``withheld``.
        operator: the pinned operator keys: an ``ERASED`` counts only when one of them signed
            it (else ``forged_erasure``); ``None``: one with an operator signature counts
            unverified (:func:`sagacity._withheld.erasure_verdict`).
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
    bulk = bulk and not reference
    version = check_schema(conn)
    keys = trusted_keys(conn, pinned_keys)
    where = "WHERE saga_id = %(s)s" if saga_id is not None else ""
    order = 'ORDER BY saga_id COLLATE "C"'
    round_columns = checkpoint_round_columns(version)
    forms = version >= FORMS_VERSION
    columns = ROW_COLUMNS + (FORM_COLUMNS if forms else "")
    # Only constant fragments are interpolated; the saga id is a bound parameter.
    queries = (
        f"SELECT {columns} FROM side_effect_journal {where} {order}, archive_id",  # noqa: S608
        "SELECT saga_id, seq, hash, signed_at_us, key_id, signature,"  # noqa: S608
        f" {round_columns} FROM archive_checkpoint {where} {order}",
        f"SELECT saga_id, max(seq), (array_agg(hash ORDER BY seq DESC))[1],"  # noqa: S608
        " (array_agg(partition_name ORDER BY seq DESC))[1]"
        f" FROM archive_retention_anchor {where} GROUP BY saga_id {order}",
        f"SELECT saga_id, head_seq, head_hash FROM archive_saga_head {where} {order}",  # noqa: S608
    )
    if not conn.autocommit:
        conn.rollback()  # the snapshot transaction below must be the first statement's
    with (
        mapped_errors("audit the archive"),
        conn.transaction(),
        contextlib.ExitStack() as cursors,
    ):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        # The second connection is made, and the server sorts the rows for the stream, while
        # the rounds are audited below.
        stream = (
            cursors.enter_context(contextlib.closing(_RowStream(conn, forms=forms)))
            if bulk
            else None
        )
        story_sql = story_query(where=where.replace("saga_id", "j.saga_id"), forms=forms)
        # Every saga's story is read like its rows: on a connection of its own, started now, so
        # the server sorts it while the rounds are checked and the chains walked.
        prefetched = (
            cursors.enter_context(
                contextlib.closing(Prefetched(conn, story_sql, {"s": saga_id}, fetch=fetch))
            )
            if bulk
            else None
        )
        checked_rounds = (
            audit_rounds(
                conn,
                saga_id=saga_id,
                keys=keys,
                fetch=fetch,
                known=known_rounds or {},
                version=version,
            )
            if version >= ROUNDS_VERSION
            else RoundAudit(
                failed={
                    n: (AuditReason.TRUNCATED, f"round {n}: the archive holds no signing rounds")
                    for n in (known_rounds or {})
                }
            )
        )
        if rounds is not None:
            rounds.rounds += checked_rounds.rounds
            rounds.failed.update(checked_rounds.failed)
            rounds.latest = checked_rounds.latest
            rounds.last = checked_rounds.last
        checked_records = (
            _audit_retention(conn, saga_id=saga_id, keys=keys, fetch=fetch)
            if version >= LOG_VERSION
            else RetentionAudit()
        )
        if retention is not None:
            retention.records += checked_records.records
            retention.failed.update(checked_records.failed)
        if prefetched is not None and prefetched.connected():
            story_rows: Iterable[Sequence[Any]] = prefetched
        else:
            story_cursor = cursors.enter_context(conn.cursor(name="sgc_audit_story"))
            story_cursor.itersize = fetch
            story_cursor.execute(story_sql, {"s": saga_id})
            story_rows = _fetched(story_cursor, fetch)
        streams: list[Iterator[tuple[str, Any]]] = []
        streamed = stream is not None and stream.connected()

        def one(
            saga: str,
            verdict: BatchVerdict | None,
            rows: Sequence[Sequence[Any]],
            cps: Sequence[Sequence[Any]] | None,
            anchors: Sequence[Sequence[Any]] | None,
            heads: Sequence[Sequence[Any]] | None,
        ) -> SagaAudit:
            return _audit_one(
                conn,
                saga,
                verdict=verdict,
                rows=rows,
                cps=cps,
                anchors=anchors,
                heads=heads,
                keys=keys,
                rounds=checked_rounds,
                records=checked_records,
                reference=reference,
                forms=forms,
                columns=columns,
            )

        def chain_audits() -> Iterator[SagaAudit]:
            if stream is not None and streamed:
                anchor_rows = {str(r[0]): r for r in conn.execute(queries[2], {"s": saga_id})}
                anchors_of = {k: (int(r[1]), str(r[2])) for k, r in anchor_rows.items()}
                if NATIVE_AUDITOR is not None and NATIVE:
                    named = [
                        cursors.enter_context(conn.cursor(name=f"sgc_audit_{i}")) for i in (1, 3)
                    ]
                    for cur, i in zip(named, (1, 3), strict=True):
                        cur.itersize = fetch
                        cur.execute(queries[i], {"s": saga_id})
                    merged = _merged_audits(
                        NATIVE_AUDITOR(
                            anchors=anchors_of,
                            failed_rounds=set(checked_rounds.failed),
                            refer={
                                k for k, r in anchor_rows.items() if r[3] in checked_records.failed
                            },
                        ),
                        stream,
                        checkpoints=named[0],
                        heads=named[1],
                        fetch=fetch,
                        anchors=anchors_of,
                        anchor_rows=anchor_rows,
                        judge_back=one,
                    )
                    cursors.enter_context(contextlib.closing(merged))  # before the reader closes
                    yield from merged
                    return
                verdicts = _verdicts(stream, anchors=anchors_of)
                cursors.enter_context(contextlib.closing(verdicts))  # before the reader closes
                streams.append(verdicts)
            for i, query in enumerate(queries):
                if i == 0 and streamed:
                    continue
                cur = cursors.enter_context(conn.cursor(name=f"sgc_audit_{i}"))
                cur.itersize = fetch
                cur.execute(query, {"s": saga_id})
                streams.append(_grouped(_fetched(cur, fetch)))
            current: list[tuple[str, Any] | None] = [next(s, None) for s in streams]
            while any(c is not None for c in current):
                saga = min(c[0] for c in current if c is not None)
                parts: list[Any] = []
                for i, c in enumerate(current):
                    if c is not None and c[0] == saga:
                        parts.append(c[1])
                        current[i] = next(streams[i], None)
                    else:
                        parts.append(None)
                chain, cps, anchors, heads = parts
                if streamed:
                    yield one(saga, chain, [], cps, anchors, heads)
                else:
                    yield one(saga, None, chain or [], cps, anchors, heads)

        yield from with_stories(
            chain_audits(),
            read_stories(story_rows, operator=operator),
            allow_unopened=allow_unopened,
        )


def _merged_audits(
    auditor: Any,
    blocks: Iterable[bytes],
    *,
    checkpoints: psycopg.ServerCursor[Any],
    heads: psycopg.ServerCursor[Any],
    fetch: int,
    anchors: Mapping[str, tuple[int, str]],
    anchor_rows: Mapping[str, Sequence[Any]],
    judge_back: Callable[..., SagaAudit],
) -> Generator[SagaAudit]:
    """Every saga's audit from the compiled merge (``sagacity_native.ChainAuditor``): the rows
    streamed in ``blocks``, checkpoints and heads a fetch at a time.  The sagas it judges come back
    as a few fields; the others, with what was read for them, go to ``judge_back`` (the Python
    path, which explains every finding)."""

    def drain() -> Iterator[SagaAudit]:
        while True:
            out, need_checkpoints, need_heads = auditor.take()
            for t in out:
                if t[1]:
                    yield SagaAudit(
                        saga_id=t[0],
                        ok=True,
                        events=t[2],
                        head_seq=t[3],
                        head_hash=t[4],
                        checkpoints=t[5],
                        signed_seq=t[6],
                        unsigned=t[7],
                    )
                else:
                    saga, verdict, cps, head = t[0], t[2], t[3], t[4]
                    anchor = anchor_rows.get(saga)
                    yield judge_back(
                        saga,
                        None if verdict is None else batch_verdict(verdict, anchors),
                        [],
                        cps or None,
                        None if anchor is None else [anchor],
                        head or None,
                    )
            if not (need_checkpoints or need_heads):
                return
            if need_checkpoints:
                auditor.add_checkpoints(checkpoints.fetchmany(fetch))
            if need_heads:
                auditor.add_heads(heads.fetchmany(fetch))

    for block in blocks:
        auditor.feed(block)
        yield from drain()
    auditor.finish()
    yield from drain()


def _audit_one(
    conn: psycopg.Connection,
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
    columns: str = ROW_COLUMNS,
) -> SagaAudit:
    """One saga's audit in :func:`iter_audits`, from what the merge read for it: the bulk
    verifier's ``verdict`` (or, without it, the saga's ``rows``, of ``columns``), its checkpoint
    rows, its retention anchor row and its recorded head row.  With ``forms`` (an archive
    holding chain forms) the rows end with the form columns."""
    events = len(rows) if verdict is None else verdict.events
    checkpoints = [
        Checkpoint(
            saga_id=c[0],
            seq=int(c[1]),
            hash=c[2],
            signed_at_us=int(c[3]),
            key_id=c[4],
            signature=c[5],
            round_id=None if c[6] is None else int(c[6]),
            leaf_index=None if c[7] is None else int(c[7]),
        )
        for c in cps or ()
    ]
    anchor = (int(anchors[0][1]), anchors[0][2]) if anchors else None
    recorded_head = (int(heads[0][1]), heads[0][2]) if heads else None
    after_seq, after_hash = anchor if anchor is not None else (0, GENESIS_HASH)
    if anchors and anchors[0][3] in records.failed:
        return SagaAudit(
            saga_id=saga,
            ok=False,
            events=events,
            head_seq=after_seq,
            head_hash=after_hash,
            bad_seq=after_seq,
            reason=AuditReason.FORGED_ANCHOR,
            detail=records.failed[anchors[0][3]],
        )
    if verdict is not None and verdict.refer:
        # A row the bulk verifier cannot judge (a form-2 row among them): the saga's rows,
        # for the paths below.
        rows = conn.execute(
            f"SELECT {columns} FROM side_effect_journal"  # noqa: S608
            " WHERE saga_id = %s ORDER BY archive_id",
            (saga,),
        ).fetchall()
        verdict, events = None, len(rows)
    elif verdict is not None and not verdict.ok:
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
    head, by_seq = None, None
    if verdict is not None:
        head, by_seq = (verdict.head_seq, verdict.head_hash), verdict.hashes_by_seq()
    elif not reference and not (forms and any(r[12] != 1 for r in rows)):
        # The column check hashes form 1; form 2 is the reference path's.
        head = _verified_head(
            [r[:12] for r in rows] if forms else rows, after_seq=after_seq, after_hash=after_hash
        )
    if head is not None:
        return _judge_checkpoints(
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
    entries: list[JournalEntry] = []
    for row in rows:
        try:
            entries.append(entry_of_row(row, forms=forms))
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


def _snapshot_reader(conn: psycopg.Connection) -> psycopg.Connection | None:
    """A second connection to the archive reading ``conn``'s snapshot (exported: the same rows,
    whatever is committed meanwhile) and search path; ``None`` where it cannot connect (a
    connection limit, a pooler), and the caller then reads the rows on ``conn``."""
    return reader_of(*shared_snapshot(conn))


def _verdicts(
    blocks: Iterable[bytes], *, anchors: Mapping[str, tuple[int, str]]
) -> Generator[tuple[str, BatchVerdict]]:
    """The bulk verifier's verdicts on the blocks of :func:`chain_rows`, by saga id order."""
    verifier = chain_verifier(anchors=anchors)
    for block in blocks:
        for verdict in verifier.feed(block):
            yield verdict.saga_id, verdict
    for verdict in verifier.finish():
        yield verdict.saga_id, verdict


class _RowStream:
    """Every saga's rows by binary ``COPY`` (:func:`chain_rows`) on a second connection reading
    ``conn``'s snapshot (:func:`_snapshot_reader`), opened and started in a thread of its own:
    the connection is made, and the server sorts the rows and sends the first of them, while
    the caller reads other things on ``conn`` (psycopg and ``select`` release the GIL while
    they wait).

    :meth:`connected` says whether the second connection could be made (if not, the caller
    reads the rows on ``conn``); then iterate the blocks once.  :meth:`close` waits for the
    thread, then closes the stream (read or not) and the connection.
    """

    def __init__(self, conn: psycopg.Connection, *, forms: bool = False) -> None:
        shared = shared_snapshot(conn)
        self._forms = forms
        self._reader: psycopg.Connection | None = None
        self._blocks: Generator[bytes] | None = None
        self._first: bytes | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._start, args=shared, name="sagacity-audit-stream"
        )
        self._thread.start()

    def _start(self, dsn: str, password: str | None, snapshot: str, search_path: str) -> None:
        try:
            self._reader = reader_of(dsn, password, snapshot, search_path)
            if self._reader is not None:
                self._blocks = chain_rows(self._reader, forms_only_first=self._forms)
                self._first = next(self._blocks, None)
        except BaseException as exc:  # raised to the caller by connected()
            self._error = exc

    def connected(self) -> bool:
        """Whether the rows are streamed on a second connection (waits for the first block).

        Raises:
            PersistenceError: the database failed opening or starting the stream.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._reader is not None

    def __iter__(self) -> Iterator[bytes]:
        if not self.connected() or self._blocks is None:
            raise RuntimeError("no second connection: the rows are read on the audit's")
        if self._first is not None:
            yield self._first
        yield from self._blocks

    def close(self) -> None:
        """Wait for the thread; then close the stream and the second connection."""
        self._thread.join()
        try:
            if self._blocks is not None:
                self._blocks.close()
        finally:
            if self._reader is not None:
                self._reader.close()


def audit(
    conn: psycopg.Connection,
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
        conn,
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
