"""Each signing pass looks for heads the table shows moved on the partitions this process
holds, which it did not read from the topic: someone else moved them (a finding; never
signed).  docs/adr/0012-checkpoint-rounds.md, "The signer's input"."""

from __future__ import annotations

from collections.abc import Callable, Collection

import psycopg

from sagacity.consumers.archive._findings import Finding, FindingReason, describe, log_findings
from sagacity.consumers.archive._ledger import IngestLedger
from sagacity.postgres.archive import mapped_errors, write_findings

Head = tuple[int, str]


def moved_heads(
    conn: psycopg.Connection,
    ledger: IngestLedger,
    *,
    partition_of: Callable[[str], int],
    ready: Collection[int],
    reported: set[tuple[str, Head]],
) -> list[Finding]:
    """The unsigned heads of sagas on ``ready`` partitions that ``ledger`` did not attest
    (each reported once: ``reported`` remembers them), written, logged and returned."""
    findings: list[Finding] = []
    if not ready:
        return findings
    with mapped_errors("look for heads moved by others"), conn.transaction():
        rows = conn.execute(
            "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
            " WHERE head_seq > checkpointed_seq"
        ).fetchall()
        for saga_id, seq, hash in rows:
            table = (int(seq), hash)
            if (saga_id, table) in reported or partition_of(saga_id) not in ready:
                continue
            entry = ledger.get(saga_id)
            if entry is not None and (entry.flagged or entry.attested == table):
                continue
            if entry is not None:
                entry.flagged = entry.stopped = True
            read = describe(entry.attested) if entry is not None else "nothing since it started"
            findings.append(
                Finding(
                    reason=FindingReason.HEAD_MOVED,
                    saga_id=saga_id,
                    detail=f"the table's head is {describe(table)} and unsigned, but this "
                    f"archiver, which holds the saga's partition, read {read} from the "
                    "topic: something else moved it; it is not signed",
                    ingested=None if entry is None else entry.attested,
                    table=table,
                )
            )
            if len(reported) > 100_000:
                reported.clear()
            reported.add((saga_id, table))
        write_findings(conn.cursor(), findings)
    log_findings(findings)
    return findings
