"""Each signing pass looks for heads the table shows moved on the partitions this process
holds, which it did not read from the topic: someone else moved them (a finding; never
signed).  docs/adr/0012-checkpoint-rounds.md, "The signer's input"."""

from __future__ import annotations

from collections.abc import Callable, Collection

from sagacity.consumers.archive._findings import Finding, FindingReason, describe, log_findings
from sagacity.consumers.archive._ledger import IngestLedger
from sagacity.ports import HeadFindings

Head = tuple[int, str]


def moved_heads(
    store: HeadFindings,
    ledger: IngestLedger,
    *,
    partition_of: Callable[[str], int],
    ready: Collection[int],
    reported: set[tuple[str, Head]],
) -> list[Finding]:
    """The unsigned heads of sagas on ``ready`` partitions that ``ledger`` did not attest
    (each reported once: ``reported`` remembers them), written to ``store`` (in the transaction
    that read the heads), logged and returned."""
    findings: list[Finding] = []
    if not ready:
        return findings
    with store.finding("look for heads moved by others") as unit:
        for saga_id, seq, hash in unit.unsigned_heads():
            table = (seq, hash)
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
        unit.write_findings(findings)
    log_findings(findings)
    return findings
