"""The archiver's findings and the saga's refusals in the archive's tables: what the archive
service found (``archive_finding``, append-only) and what ``verify --saga`` reads back beside the
chain (docs/adr/0012-checkpoint-rounds.md, "The signer's input")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from sagacity.ports import StoredFinding
from sagacity.postgres._archive_schema import INGEST_VERSION
from sagacity.postgres.archive._db import check_schema, mapped_errors


def write_findings(cur: psycopg.Cursor, findings: Sequence[StoredFinding]) -> None:
    """Insert ``findings`` (inside the caller's transaction)."""
    for f in findings:
        cur.execute(
            "INSERT INTO archive_finding (reason, detail, saga_id, ingested_seq, ingested_hash,"
            " table_seq, table_hash) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                str(f.reason),
                f.detail,
                f.saga_id,
                None if f.ingested is None else f.ingested[0],
                None if f.ingested is None else f.ingested[1],
                None if f.table is None else f.table[0],
                None if f.table is None else f.table[1],
            ),
        )


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
