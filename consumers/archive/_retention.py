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
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagacity.config._duration import parse_retention
from sagacity.consumers.archive._checkpoints import Signer
from sagacity.consumers.archive._merkle import RootBuilder
from sagacity.entries._events import now_micros
from sagacity.errors import DurationError, RetentionError
from sagacity.ports import ArchiveMonth, RetentionMonths, RetentionUnit

MIN_RETENTION_MONTHS = 6
"""The shortest retention accepted without ``force`` (EU AI Act Art. 19: at least six months)."""

RECORD_MAGIC = b"SGRT1"
ANCHOR_MAGIC = b"SGRA1"
NO_ANCHORS_ROOT = "0" * 64
"""The anchors root of a month that left no anchors."""


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


Partition = ArchiveMonth
"""One month of the journal (the store's :class:`~sagacity.ports.ArchiveMonth`)."""


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


def _signed_record(signer: Signer, **fields: object) -> RetentionRecord:
    unsigned = RetentionRecord(
        signed_at_us=now_micros(),
        key_id=signer.key_id,
        **fields,  # type: ignore[arg-type]
    )
    return dataclasses.replace(unsigned, signature=signer.sign_hex(unsigned.message()))


def sign_records(store: RetentionMonths, signer: Signer) -> int:
    """Sign every retention record not signed yet (months dropped before records were
    signed); return how many.  The operator attests, with the archive's key, the anchors those
    months left as they now are: run it once after upgrading, before the database could have
    been changed by anyone else.

    Raises:
        PersistenceError: the database failed.
    """
    signed = 0
    with store.signing() as unit:
        unsigned = unit.unsigned_months()
        if unsigned:
            unit.register_key(signer.key_id, signer.public_hex)
        for month in unsigned:
            count, root = anchors_root(unit.leaf_ordered_anchors(month.name))
            record = _signed_record(
                signer,
                partition_name=month.name,
                range_from_us=month.range_from_us,
                range_to_us=month.range_to_us,
                row_count=month.row_count,
                export_sha256=month.export_sha256,
                anchor_count=count,
                anchors_root=root,
            )
            unit.store_signature(record)
            signed += 1
    return signed


def run_retention(
    store: RetentionMonths,
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
    expired = [p for p in store.months() if p.range_to_us <= cutoff]
    actions = []
    for part in expired:
        if not apply:
            actions.append(
                RetentionAction(
                    partition=part,
                    rows=store.row_count(part),
                    export_file=None,
                    export_sha256=None,
                    dropped=False,
                )
            )
            continue
        assert export_dir is not None
        assert signer is not None
        actions.append(_export_and_drop(store, part, export_dir, signer))
    return actions


def _export_and_drop(
    store: RetentionMonths, part: Partition, export_dir: Path, signer: Signer
) -> RetentionAction:
    try:
        export_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RetentionError(f"cannot create {export_dir}: {exc.strerror}") from exc
    target = export_dir / f"{part.name}.jsonl"
    partial = target.with_suffix(".jsonl.partial")
    try:
        with store.dropping(part) as unit:
            rows, digest = _exported(unit, partial=partial, target=target)
            with unit.anchors() as anchors:
                count, root = anchors_root(anchors)
            unit.register_key(signer.key_id, signer.public_hex)
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
            unit.store_record(record, export_file=str(target))
            unit.drop()
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


def _exported(unit: RetentionUnit, *, partial: Path, target: Path) -> tuple[int, str]:
    """Write the month's rows, one JSON object a line, to ``partial``, synced, then renamed
    to ``target``; how many rows, and the file's SHA-256.

    Raises:
        RetentionError: the file could not be written.
    """
    digest = hashlib.sha256()
    rows = 0
    try:
        with partial.open("wb") as out, unit.export_lines() as lines:
            for line in lines:
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
