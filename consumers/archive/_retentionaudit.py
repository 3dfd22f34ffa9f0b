"""Auditing the signed retention records: each record's signature, and its anchors' root.

When retention drops a month of the archive it keeps, per saga whose start it removed, an
anchor (the last seq and hash dropped), and signs a record of the month's anchors
(docs/adr/0015-round-log.md).  A record that fails fails every saga anchored by it
(``forged_anchor``, :func:`~sagacity.consumers.archive._judging.audit_one`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sagacity.consumers.archive._checkpoints import bytes_signature_valid
from sagacity.consumers.archive._merkle import RootBuilder
from sagacity.consumers.archive._retention import NO_ANCHORS_ROOT, anchor_leaf, record_of_row
from sagacity.consumers.archive._verdicts import RetentionAudit
from sagacity.ports import RetentionStreams


def judge_record(
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


def audit_retention(
    archive: RetentionStreams,
    *,
    saga_id: str | None,
    keys: Mapping[str, bytes],
    fetch: int,
) -> RetentionAudit:
    """Check every signed retention record (or those of one saga's anchors) against its
    anchors, streamed in leaf order, inside the caller's snapshot (``archive``:
    :class:`~sagacity.ports.RetentionStreams`)."""
    audit = RetentionAudit()
    with archive.retention_streams(saga_id=saga_id, fetch=fetch) as (records, anchors):
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
            finding = judge_record(
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
