"""Retention: export whole expired month partitions, then drop them.

Rows are never deleted one by one (triggers refuse it); a month leaves the archive only as a
whole partition, by its owner, after its rows were written to an export file whose SHA-256 is
recorded.  For each saga in the month, the last link dropped is kept as an anchor so the rest
of a chain that crossed the boundary still verifies (docs/adr/0006-archive-and-checkpoints.md).

Each month's record is signed with the archive's key (docs/adr/0015-round-log.md), over the
export's digest and the Merkle root of its anchors (in saga id byte order)::

    anchor leaf = SHA-256(0x00 || "SGRA1" || F(saga_id) || F(int64_be(seq)) || F(hash))
    record      = "SGRT1" || F(partition_name) || F(int64_be(range_from_us))
                  || F(int64_be(range_to_us)) || F(int64_be(row_count)) || F(export_sha256)
                  || F(int64_be(anchor_count)) || F(anchors_root) || F(int64_be(signed_at_us))
                  || F(key_id)

``anchors_root`` is 64 zeros for a month without anchors.  An anchor is evidence only as a
leaf of a signed record: a forged or altered one fails its record.
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime
import hashlib
import os
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from sagacity.config._duration import parse_retention
from sagacity.consumers.archive._checkpoints import Signer
from sagacity.consumers.archive._merkle import RootBuilder
from sagacity.entries._events import now_micros
from sagacity.errors import DurationError, RetentionError
from sagacity.postgres.archive import check_schema, current_schema, mapped_errors

MIN_RETENTION_MONTHS = 6
"""The shortest retention accepted without ``force`` (EU AI Act Art. 19: at least six months)."""

RECORD_MAGIC = b"SGRT1"
ANCHOR_MAGIC = b"SGRA1"
NO_ANCHORS_ROOT = "0" * 64
"""The anchors root of a month that left no anchors."""

_BOUND = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


def parse_keep(text: str) -> int:
    """Whole months from ``24mo``, ``2y`` or ``730d`` (days rounded up to months).

    Raises:
        RetentionError: anything else; ``24m`` is refused as ambiguous (``m`` is minutes).
    """
    try:
        return parse_retention(text).months
    except DurationError as exc:
        raise RetentionError(exc.message) from exc


def cutoff_us(keep_months: int, now: datetime.datetime) -> int:
    """The earliest event time still kept: ``now`` minus ``keep_months`` calendar months."""
    month_index = now.year * 12 + (now.month - 1) - keep_months
    year, month = divmod(month_index, 12)
    month += 1
    day = min(now.day, calendar.monthrange(year, month)[1])
    then = now.replace(year=year, month=month, day=day)
    return int(then.timestamp()) * 1_000_000 + then.microsecond


@dataclass(frozen=True, kw_only=True)
class Partition:
    """One month of the journal."""

    name: str
    range_from_us: int
    range_to_us: int


@dataclass(frozen=True, kw_only=True)
class RetentionAction:
    """What retention did (or would do) with one expired month."""

    partition: Partition
    rows: int
    export_file: Path | None
    export_sha256: str | None
    dropped: bool


def _field(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def anchor_leaf(*, saga_id: str, seq: int, hash: str) -> bytes:
    """The Merkle leaf of one retention anchor (32 bytes)."""
    return hashlib.sha256(
        b"\x00"
        + ANCHOR_MAGIC
        + _field(saga_id.encode("utf-8"))
        + _field(struct.pack(">q", seq))
        + _field(hash.encode("ascii"))
    ).digest()


def anchors_root(anchors: Iterable[tuple[str, int, str]]) -> tuple[int, str]:
    """(count, root hex) of anchors ``(saga_id, seq, hash)`` in leaf order."""
    builder = RootBuilder()
    for saga_id, seq, hash in anchors:
        builder.add(anchor_leaf(saga_id=saga_id, seq=int(seq), hash=hash))
    root = builder.root()
    return builder.count, root.hex() if root is not None else NO_ANCHORS_ROOT


@dataclass(frozen=True, kw_only=True)
class RetentionRecord:
    """What retention dropped in one month, as signed."""

    partition_name: str
    range_from_us: int
    range_to_us: int
    row_count: int
    export_sha256: str
    anchor_count: int
    anchors_root: str
    signed_at_us: int
    key_id: str
    signature: str | None = None

    def message(self) -> bytes:
        """The exact bytes the record's signature covers (``SGRT1``)."""
        return b"".join(
            (
                RECORD_MAGIC,
                _field(self.partition_name.encode("utf-8")),
                _field(struct.pack(">q", self.range_from_us)),
                _field(struct.pack(">q", self.range_to_us)),
                _field(struct.pack(">q", self.row_count)),
                _field(self.export_sha256.encode("ascii")),
                _field(struct.pack(">q", self.anchor_count)),
                _field(self.anchors_root.encode("ascii")),
                _field(struct.pack(">q", self.signed_at_us)),
                _field(self.key_id.encode("ascii")),
            )
        )


def record_of_row(row: Sequence[Any]) -> RetentionRecord | None:
    """A record from the Postgres archive's ``RECORD_COLUMNS``, or ``None`` for one never
    signed."""
    if row[9] is None or row[5] is None or row[7] is None:
        return None
    return RetentionRecord(
        partition_name=str(row[0]),
        range_from_us=int(row[1]),
        range_to_us=int(row[2]),
        row_count=int(row[3]),
        export_sha256=str(row[4]),
        anchor_count=int(row[5]),
        anchors_root=str(row[6]),
        signed_at_us=int(row[7]),
        key_id=str(row[8]),
        signature=str(row[9]),
    )


def _register_key(conn: psycopg.Connection, signer: Signer) -> None:
    conn.execute(
        "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)"
        " ON CONFLICT (key_id) DO NOTHING",
        (signer.key_id, signer.public_hex),
    )


def _signed_record(signer: Signer, **fields: object) -> RetentionRecord:
    unsigned = RetentionRecord(
        signed_at_us=now_micros(),
        key_id=signer.key_id,
        **fields,  # type: ignore[arg-type]
    )
    return dataclasses.replace(unsigned, signature=signer.sign_hex(unsigned.message()))


def sign_records(conn: psycopg.Connection, signer: Signer) -> int:
    """Sign every retention record not signed yet (months dropped before records were
    signed); return how many.  The operator attests, with the archive's key, the anchors those
    months left as they now are: run it once after upgrading, before the database could have
    been changed by anyone else.

    Raises:
        PersistenceError: the database failed.
    """
    signed = 0
    with mapped_errors("sign retention records"), conn.transaction():
        check_schema(conn)
        unsigned = conn.execute(
            "SELECT partition_name, range_from_us, range_to_us, row_count, export_sha256"
            " FROM archive_retention WHERE signature IS NULL ORDER BY partition_name"
        ).fetchall()
        if unsigned:
            _register_key(conn, signer)
        for name, range_from, range_to, row_count, sha256 in unsigned:
            conn.execute(
                "UPDATE archive_retention_anchor a SET leaf_index = o.n FROM (SELECT saga_id,"
                ' seq, row_number() OVER (ORDER BY saga_id COLLATE "C", seq) - 1 AS n'
                " FROM archive_retention_anchor WHERE partition_name = %s) o"
                " WHERE a.saga_id = o.saga_id AND a.seq = o.seq",
                (name,),
            )
            count, root = anchors_root(
                conn.execute(
                    "SELECT saga_id, seq, hash FROM archive_retention_anchor"
                    " WHERE partition_name = %s ORDER BY leaf_index",
                    (name,),
                )
            )
            record = _signed_record(
                signer,
                partition_name=name,
                range_from_us=int(range_from),
                range_to_us=int(range_to),
                row_count=int(row_count),
                export_sha256=sha256,
                anchor_count=count,
                anchors_root=root,
            )
            conn.execute(
                "UPDATE archive_retention SET anchor_count = %s, anchors_root = %s,"
                " signed_at_us = %s, key_id = %s, signature = %s WHERE partition_name = %s",
                (count, root, record.signed_at_us, record.key_id, record.signature, name),
            )
            signed += 1
    return signed


def partitions(conn: psycopg.Connection) -> list[Partition]:
    """The journal's month partitions, oldest first."""
    with mapped_errors("list partitions"):
        found = conn.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'side_effect_journal'::regclass"
        ).fetchall()
    out = []
    for name, bound in found:
        match = _BOUND.search(bound or "")
        if match:
            out.append(
                Partition(
                    name=name, range_from_us=int(match.group(1)), range_to_us=int(match.group(2))
                )
            )
    return sorted(out, key=lambda p: p.range_from_us)


def run_retention(
    conn: psycopg.Connection,
    *,
    keep_months: int,
    export_dir: Path | None = None,
    apply: bool = False,
    force: bool = False,
    now: datetime.datetime | None = None,
    signer: Signer | None = None,
) -> list[RetentionAction]:
    """Find the months older than ``keep_months``; with ``apply``, export and drop each.

    Each month is handled in its own transaction: the export file is written and synced,
    its digest and the per-saga anchors recorded and signed by ``signer``, then the partition
    dropped.  A failure leaves that month (and later ones) in place.

    Raises:
        RetentionError: retention shorter than six months without ``force``; ``apply``
            without ``export_dir`` or without ``signer``; an export that cannot be written.
        PersistenceError: the database failed (run by a role that does not own the table,
            for instance).
    """
    if keep_months < MIN_RETENTION_MONTHS and not force:
        raise RetentionError(
            f"a retention of {keep_months} month(s) is shorter than the {MIN_RETENTION_MONTHS}"
            " months logs must be kept; pass --force to do it anyway"
        )
    if apply and export_dir is None:
        raise RetentionError("--apply needs --export-dir: expired months are exported first")
    if apply and signer is None:
        raise RetentionError(
            "--apply needs --signing-key: the anchors a dropped month leaves are signed"
        )
    moment = now if now is not None else datetime.datetime.now(datetime.UTC)
    cutoff = cutoff_us(keep_months, moment)
    # In a transaction of its own, so that each month's below is a real one (committed by
    # itself), not a savepoint of an implicit transaction these reads would have opened.
    with mapped_errors("list expired months"), conn.transaction():
        check_schema(conn)
        schema = current_schema(conn)
        expired = [p for p in partitions(conn) if p.range_to_us <= cutoff]
    actions = []
    for part in expired:
        table = sql.Identifier(schema, part.name)
        if not apply:
            with mapped_errors("count an expired month"), conn.transaction():
                row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
            actions.append(
                RetentionAction(
                    partition=part,
                    rows=int(row[0]) if row else 0,
                    export_file=None,
                    export_sha256=None,
                    dropped=False,
                )
            )
            continue
        assert export_dir is not None
        assert signer is not None
        actions.append(_export_and_drop(conn, part, table, export_dir, signer))
    return actions


def _export_and_drop(
    conn: psycopg.Connection,
    part: Partition,
    table: sql.Composable,
    export_dir: Path,
    signer: Signer,
) -> RetentionAction:
    try:
        export_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RetentionError(f"cannot create {export_dir}: {exc.strerror}") from exc
    target = export_dir / f"{part.name}.jsonl"
    partial = target.with_suffix(".jsonl.partial")
    try:
        with mapped_errors("export and drop an expired month"), conn.transaction():
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
            rows, digest = _exported(conn, table, partial=partial, target=target)
            anchors = sql.SQL(
                'SELECT DISTINCT ON (saga_id COLLATE "C") saga_id, seq, hash FROM {}'
                ' ORDER BY saga_id COLLATE "C", seq DESC'
            ).format(table)
            with conn.cursor(name="sgc_retention_anchors") as cur:
                cur.itersize = 5_000
                cur.execute(anchors)
                count, root = anchors_root(cur)
            _register_key(conn, signer)
            record = _signed_record(
                signer,
                partition_name=part.name,
                range_from_us=part.range_from_us,
                range_to_us=part.range_to_us,
                row_count=rows,
                export_sha256=digest,
                anchor_count=count,
                anchors_root=root,
            )
            _store_record(conn, part, record, rows=rows, target=target, anchors=anchors)
            # DDL, not a row change: the append-only row and TRUNCATE triggers do not apply,
            # and only the table's owner may do it.
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
    except BaseException:
        # The finished export is kept even then: if the commit's answer was lost the month
        # may be gone and the file is its only copy.  A later run overwrites it.
        partial.unlink(missing_ok=True)
        raise
    return RetentionAction(
        partition=part,
        rows=rows,
        export_file=target,
        export_sha256=digest,
        dropped=True,
    )


def _exported(
    conn: psycopg.Connection, table: sql.Composable, *, partial: Path, target: Path
) -> tuple[int, str]:
    """Write the month's rows, one JSON object a line, to ``partial``, synced, then renamed
    to ``target``; how many rows, and the file's SHA-256.

    Raises:
        RetentionError: the file could not be written.
    """
    digest = hashlib.sha256()
    rows = 0
    try:
        with partial.open("wb") as out, conn.cursor(name="sgc_retention") as cur:
            cur.itersize = 5_000
            cur.execute(
                sql.SQL(
                    "SELECT row_to_json(t)::text FROM {} t ORDER BY saga_id, archive_id"
                ).format(table)
            )
            for (line,) in cur:
                data = line.encode("utf-8") + b"\n"
                out.write(data)
                digest.update(data)
                rows += 1
            out.flush()
            os.fsync(out.fileno())
        partial.replace(target)
    except OSError as exc:
        raise RetentionError(f"cannot write {target}: {exc.strerror}") from exc
    return rows, digest.hexdigest()


def _store_record(
    conn: psycopg.Connection,
    part: Partition,
    record: RetentionRecord,
    *,
    rows: int,
    target: Path,
    anchors: sql.Composable,
) -> None:
    """Store the month's signed retention record and its anchors (the last seq and hash of
    each saga it holds, in leaf order), in the caller's transaction."""
    conn.execute(
        "INSERT INTO archive_retention (partition_name, range_from_us, range_to_us,"
        " row_count, export_file, export_sha256, anchor_count, anchors_root,"
        " signed_at_us, key_id, signature)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            part.name,
            part.range_from_us,
            part.range_to_us,
            rows,
            str(target),
            record.export_sha256,
            record.anchor_count,
            record.anchors_root,
            record.signed_at_us,
            record.key_id,
            record.signature,
        ),
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name,"
            " leaf_index) SELECT saga_id, seq, hash, {},"
            ' row_number() OVER (ORDER BY saga_id COLLATE "C") - 1 FROM ({}) a'
        ).format(sql.Literal(part.name), anchors)
    )
