"""Retention: export whole expired month partitions, then drop them.

Rows are never deleted one by one (triggers refuse it); a month leaves the archive only as a
whole partition, by its owner, after its rows were written to an export file whose SHA-256 is
recorded.  For each saga in the month, the last link dropped is kept as an anchor so the rest
of a chain that crossed the boundary still verifies (docs/adr/0006-archive-and-checkpoints.md).
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from sagacity._duration import parse_retention
from sagacity.consumers.archive._db import check_schema, current_schema, mapped_errors
from sagacity.errors import DurationError, RetentionError

MIN_RETENTION_MONTHS = 6
"""The shortest retention accepted without ``force`` (EU AI Act Art. 19: at least six months)."""

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
) -> list[RetentionAction]:
    """Find the months older than ``keep_months``; with ``apply``, export and drop each.

    Each month is handled in its own transaction: the export file is written and synced,
    its digest and the per-saga anchors recorded, then the partition dropped.  A failure
    leaves that month (and later ones) in place.

    Raises:
        RetentionError: retention shorter than six months without ``force``; ``apply``
            without ``export_dir``; an export that cannot be written.
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
    check_schema(conn)
    schema = current_schema(conn)
    moment = now if now is not None else datetime.datetime.now(datetime.UTC)
    cutoff = cutoff_us(keep_months, moment)
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
        actions.append(_export_and_drop(conn, part, table, export_dir))
    return actions


def _export_and_drop(
    conn: psycopg.Connection, part: Partition, table: sql.Composable, export_dir: Path
) -> RetentionAction:
    try:
        export_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RetentionError(f"cannot create {export_dir}: {exc.strerror}") from exc
    target = export_dir / f"{part.name}.jsonl"
    partial = target.with_suffix(".jsonl.partial")
    digest = hashlib.sha256()
    rows = 0
    try:
        with mapped_errors("export and drop an expired month"), conn.transaction():
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
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
            conn.execute(
                "INSERT INTO archive_retention (partition_name, range_from_us, range_to_us,"
                " row_count, export_file, export_sha256) VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    part.name,
                    part.range_from_us,
                    part.range_to_us,
                    rows,
                    str(target),
                    digest.hexdigest(),
                ),
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name)"
                    " SELECT DISTINCT ON (saga_id) saga_id, seq, hash, {} FROM {}"
                    " ORDER BY saga_id, seq DESC ON CONFLICT DO NOTHING"
                ).format(sql.Literal(part.name), table)
            )
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
        export_sha256=digest.hexdigest(),
        dropped=True,
    )
