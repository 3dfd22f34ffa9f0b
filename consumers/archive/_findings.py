"""What the archiver finds the database to hold that it did not write itself.

A finding is reported three ways: a row in ``archive_finding`` (append-only; ``verify --saga``
shows it; written by the Postgres archive, :func:`sagacity.postgres.archive.write_findings`), a
log line and the ``sagacity_archive_findings_total{reason}`` metric, the last two
outside the database (docs/adr/0012-checkpoint-rounds.md, "The signer's input").  Nothing a
finding names is ever signed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

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


def log_findings(findings: Sequence[Finding]) -> None:
    """Log ``findings`` once they are committed."""
    for f in findings:
        log.error("archive finding %s for saga %r: %s", f.reason.value, f.saga_id, f.detail)


def describe(head: Head | None) -> str:
    """``seq N (hash…)`` or ``none``."""
    return "none" if head is None else f"seq {head[0]} ({head[1][:16]}…)"
