"""The archive: the journal's hash chains in append-only Postgres, verified on ingest, signed,
retained and exported for auditors (docs/adr/0006-archive-and-checkpoints.md)."""

from sagacity.consumers.archive._db import ARCHIVER_ROLE, check_schema, grant_archiver, migrate
from sagacity.consumers.archive._ingest import (
    BatchArchiver,
    BatchReport,
    QuarantineReason,
    RawEvent,
)

__all__ = [
    "ARCHIVER_ROLE",
    "BatchArchiver",
    "BatchReport",
    "QuarantineReason",
    "RawEvent",
    "check_schema",
    "grant_archiver",
    "migrate",
]
