"""The archive: the journal's hash chains in append-only Postgres, verified on ingest, signed,
retained and exported for auditors (docs/adr/0006-archive-and-checkpoints.md).

Names are imported from their modules on first use, so a process that needs one part (an
agent's read index: :class:`PostgresSagaIndex`, psycopg only) does not import the others (the
signing code needs the ``services`` extra's ``cryptography`` and ``pynacl``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sagacity.consumers.archive._audit import (
        AuditSummary,
        RetentionAudit,
        SagaAudit,
        audit,
        iter_audits,
    )
    from sagacity.consumers.archive._authorship import Authorship
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
    from sagacity.consumers.archive._reasons import AuditReason
    from sagacity.consumers.archive._roundaudit import RoundAudit

_MODULE_OF = {
    "ARCHIVER_ROLE": "_db",
    "AuditReason": "_reasons",
    "AuditSummary": "_audit",
    "Authorship": "_authorship",
    "BatchArchiver": "_ingest",
    "BatchReport": "_ingest",
    "Checkpoint": "_checkpoints",
    "PostgresSagaIndex": "_index",
    "QuarantineReason": "_ingest",
    "RawEvent": "_ingest",
    "RetentionAudit": "_audit",
    "RoundAudit": "_roundaudit",
    "SagaAudit": "_audit",
    "SignedRound": "_checkpoints",
    "Signer": "_checkpoints",
    "audit": "_audit",
    "check_schema": "_db",
    "ensure_schema": "_db",
    "generate_key": "_checkpoints",
    "grant_archiver": "_db",
    "iter_audits": "_audit",
    "migrate": "_db",
    "sign_pending": "_checkpoints",
}

__all__ = [
    "ARCHIVER_ROLE",
    "AuditReason",
    "AuditSummary",
    "Authorship",
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


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
