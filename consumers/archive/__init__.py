"""The archive: the journal's hash chains in append-only Postgres, verified on ingest, signed,
retained and exported for auditors (docs/adr/0006-archive-and-checkpoints.md).

Names are imported from their modules on first use, so a process that needs one part does not
import the others (the signing code needs the ``services`` extra's ``cryptography`` and
``pynacl``).  The agents' read index over the archive is the Postgres adapter's
(:class:`sagacity.postgres.PostgresSagaIndex`), and so are the archive's tables: connections,
migrations, the archiver's role, the erasure's side and every statement are
:mod:`sagacity.postgres.archive`'s, which the command layer and the composition root build and
hand to the service as the archive's ports (:mod:`sagacity.ports`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sagacity.consumers.archive._abandoned import quiet_sagas
    from sagacity.consumers.archive._abandoned import sweep as sweep_abandoned
    from sagacity.consumers.archive._audit import audit, iter_audits, trusted_keys
    from sagacity.consumers.archive._authorship import Authorship
    from sagacity.consumers.archive._catchup import CatchUp, catch_up_and_sign
    from sagacity.consumers.archive._checkpoints import (
        Checkpoint,
        SignedRound,
        Signer,
        generate_key,
        parse_public_key,
        sign_pending,
        signature_valid,
    )
    from sagacity.consumers.archive._erasure import (
        ArchiveErasure,
        ErasureAudit,
        audit_erasures,
    )
    from sagacity.consumers.archive._export import export_bundle
    from sagacity.consumers.archive._findings import Finding, FindingReason
    from sagacity.consumers.archive._ingest import (
        BatchArchiver,
        BatchReport,
        QuarantineReason,
        RawEvent,
    )
    from sagacity.consumers.archive._ledger import IngestLedger
    from sagacity.consumers.archive._reasons import AuditReason
    from sagacity.consumers.archive._replay import ReplayReport, diff_with_archive, read_topic
    from sagacity.consumers.archive._retention import parse_keep, run_retention, sign_records
    from sagacity.consumers.archive._roundaudit import RoundAudit
    from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings, archiver_of
    from sagacity.consumers.archive._timewindow import TimeWindow
    from sagacity.consumers.archive._verdicts import (
        AuditSummary,
        RetentionAudit,
        SagaAudit,
        unsigned_as_failure,
    )
    from sagacity.consumers.archive._watch import (
        AuditorState,
        WatchReport,
        post_alerts,
        watch_once,
    )
    from sagacity.consumers.archive._witness import publish as publish_witness
    from sagacity.consumers.archive._witness import read as read_witness

# Public name → its module (``module:attribute`` when exported under another name).
_MODULE_OF = {
    "ArchiveErasure": "_erasure",
    "ArchiveService": "_service",
    "ArchiveSettings": "_service",
    "AuditReason": "_reasons",
    "AuditSummary": "_verdicts",
    "AuditorState": "_watch",
    "Authorship": "_authorship",
    "BatchArchiver": "_ingest",
    "BatchReport": "_ingest",
    "CatchUp": "_catchup",
    "Finding": "_findings",
    "FindingReason": "_findings",
    "IngestLedger": "_ledger",
    "TimeWindow": "_timewindow",
    "archiver_of": "_service",
    "catch_up_and_sign": "_catchup",
    "ErasureAudit": "_erasure",
    "Checkpoint": "_checkpoints",
    "QuarantineReason": "_ingest",
    "RawEvent": "_ingest",
    "ReplayReport": "_replay",
    "RetentionAudit": "_verdicts",
    "RoundAudit": "_roundaudit",
    "SagaAudit": "_verdicts",
    "SignedRound": "_checkpoints",
    "Signer": "_checkpoints",
    "audit": "_audit",
    "audit_erasures": "_erasure",
    "diff_with_archive": "_replay",
    "export_bundle": "_export",
    "generate_key": "_checkpoints",
    "iter_audits": "_audit",
    "parse_keep": "_retention",
    "parse_public_key": "_checkpoints",
    "post_alerts": "_watch",
    "publish_witness": "_witness:publish",
    "quiet_sagas": "_abandoned",
    "read_topic": "_replay",
    "read_witness": "_witness:read",
    "run_retention": "_retention",
    "sign_pending": "_checkpoints",
    "sign_records": "_retention",
    "signature_valid": "_checkpoints",
    "sweep_abandoned": "_abandoned:sweep",
    "trusted_keys": "_audit",
    "unsigned_as_failure": "_verdicts",
    "watch_once": "_watch",
    "WatchReport": "_watch",
}

__all__ = [
    "ArchiveErasure",
    "ArchiveService",
    "ArchiveSettings",
    "AuditReason",
    "AuditSummary",
    "AuditorState",
    "Authorship",
    "BatchArchiver",
    "BatchReport",
    "CatchUp",
    "Checkpoint",
    "ErasureAudit",
    "Finding",
    "FindingReason",
    "IngestLedger",
    "QuarantineReason",
    "RawEvent",
    "ReplayReport",
    "RetentionAudit",
    "RoundAudit",
    "SagaAudit",
    "SignedRound",
    "Signer",
    "TimeWindow",
    "WatchReport",
    "archiver_of",
    "audit",
    "audit_erasures",
    "catch_up_and_sign",
    "diff_with_archive",
    "export_bundle",
    "generate_key",
    "iter_audits",
    "parse_keep",
    "parse_public_key",
    "post_alerts",
    "publish_witness",
    "quiet_sagas",
    "read_topic",
    "read_witness",
    "run_retention",
    "sign_pending",
    "sign_records",
    "signature_valid",
    "sweep_abandoned",
    "trusted_keys",
    "unsigned_as_failure",
    "watch_once",
]


def __getattr__(name: str) -> object:
    found = _MODULE_OF.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = found.partition(":")  # "module:attribute" when exported renamed
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
