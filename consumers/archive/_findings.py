"""What the archiver finds the database to hold that it did not write itself.

A finding is reported three ways: a row in ``archive_finding`` (append-only; ``verify --saga``
shows it), a log line and the ``sagacity_archive_findings_total{reason}`` metric, the last two
outside the database (docs/adr/0012-checkpoint-rounds.md, "The signer's input").  Nothing a
finding names is ever signed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

log = logging.getLogger("sagacity.archive")

Head = tuple[int, str]


class FindingReason(enum.StrEnum):
    """Why the archiver reported a saga (``archive_finding.reason``)."""

    HEAD_MOVED = "head_moved"
    """The saga's head in ``archive_saga_head`` is not the one this archiver's last commit (or
    its signing round) left: something else changed the table."""
    UNATTESTED = "unattested"
    """The archiver extended a head it neither read from the topic nor verified under its own
    key (rows it did not ingest, or lost its record of): the saga is not signed past the last
    head it attested."""


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One finding: its reason, the saga, the head this process attested and the table's."""

    reason: FindingReason
    saga_id: str
    detail: str
    ingested: Head | None = None
    table: Head | None = None


def write_findings(cur: psycopg.Cursor, findings: Sequence[Finding]) -> None:
    """Insert ``findings`` (inside the caller's transaction) and log each."""
    for f in findings:
        cur.execute(
            "INSERT INTO archive_finding (reason, detail, saga_id, ingested_seq, ingested_hash,"
            " table_seq, table_hash) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                f.reason.value,
                f.detail,
                f.saga_id,
                None if f.ingested is None else f.ingested[0],
                None if f.ingested is None else f.ingested[1],
                None if f.table is None else f.table[0],
                None if f.table is None else f.table[1],
            ),
        )


def log_findings(findings: Sequence[Finding]) -> None:
    """Log ``findings`` once they are committed."""
    for f in findings:
        log.error("archive finding %s for saga %r: %s", f.reason.value, f.saga_id, f.detail)


def describe(head: Head | None) -> str:
    """``seq N (hash…)`` or ``none``."""
    return "none" if head is None else f"seq {head[0]} ({head[1][:16]}…)"


@dataclass(frozen=True, kw_only=True)
class SagaRefusals:
    """What the archive refused or reported of one saga, beside its chain.

    Attributes:
        quarantined: the saga's quarantined messages (by saga id or by key), by reason.
        findings: the archiver's findings for the saga, ``(reason, detail)`` oldest first.
    """

    quarantined: dict[str, int]
    findings: list[tuple[str, str]]

    @property
    def quarantined_total(self) -> int:
        """Quarantined messages, whatever the reason."""
        return sum(self.quarantined.values())


def saga_refusals(conn: psycopg.Connection, saga_id: str) -> SagaRefusals:
    """The quarantined messages and the findings of ``saga_id`` (``verify --saga``)."""
    from sagacity.consumers.archive._db import check_schema, mapped_errors
    from sagacity.postgres._archive_schema import INGEST_VERSION

    version = check_schema(conn)
    with mapped_errors("read the saga's quarantine"):
        quarantined = {
            str(reason): int(count)
            for reason, count in conn.execute(
                "SELECT reason, count(*) FROM archive_quarantine"
                " WHERE saga_id = %s OR raw_key = %s GROUP BY reason ORDER BY reason",
                (saga_id, saga_id.encode("utf-8", "surrogatepass")),
            )
        }
        findings: list[tuple[str, str]] = []
        if version >= INGEST_VERSION:
            findings = [
                (str(r), str(d))
                for r, d in conn.execute(
                    "SELECT reason, detail FROM archive_finding WHERE saga_id = %s ORDER BY id",
                    (saga_id,),
                )
            ]
    return SagaRefusals(quarantined=quarantined, findings=findings)
