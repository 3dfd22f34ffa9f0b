"""The archive: the journal's hash chains in append-only Postgres, verified on ingest, signed,
retained and exported for auditors (docs/adr/0006-archive-and-checkpoints.md)."""

from sagacity.consumers.archive._audit import (
    AuditReason,
    AuditSummary,
    RetentionAudit,
    RoundAudit,
    SagaAudit,
    audit,
    iter_audits,
)
from sagacity.consumers.archive._checkpoints import (
    Checkpoint,
    SignedRound,
    Signer,
    generate_key,
    sign_pending,
)
from sagacity.consumers.archive._db import (
    ARCHIVER_ROLE,
    check_schema,
    ensure_schema,
    grant_archiver,
    migrate,
)
from sagacity.consumers.archive._index import PostgresSagaIndex
from sagacity.consumers.archive._ingest import (
    BatchArchiver,
    BatchReport,
    QuarantineReason,
    RawEvent,
)

__all__ = [
    "ARCHIVER_ROLE",
    "AuditReason",
    "AuditSummary",
    "BatchArchiver",
    "BatchReport",
    "Checkpoint",
    "PostgresSagaIndex",
    "QuarantineReason",
    "RawEvent",
    "RetentionAudit",
    "RoundAudit",
    "SagaAudit",
    "SignedRound",
    "Signer",
    "audit",
    "check_schema",
    "ensure_schema",
    "generate_key",
    "grant_archiver",
    "iter_audits",
    "migrate",
    "sign_pending",
]
