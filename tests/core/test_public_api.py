"""The public API is exported deliberately: pinned here so a change is a conscious one."""

from __future__ import annotations

import subprocess
import sys

import sagacity

PINNED = [
    "GENESIS_HASH",
    "AnyEventType",
    "ApprovalRequest",
    "BreakReason",
    "ChainVerdict",
    "CompensationCall",
    "CompensationContext",
    "CompensationReport",
    "CompensationRunner",
    "DecisionSigner",
    "DecisionVerifier",
    "EntryDraft",
    "EventType",
    "InMemoryJournal",
    "Journal",
    "JournalEntry",
    "RegisteredTool",
    "Reversibility",
    "SagaResult",
    "SagaRun",
    "SagaStatus",
    "Sagacity",
    "SagacityError",
    "Step",
    "ToolRegistry",
    "Undo",
    "UndoCall",
    "UnknownEventType",
    "compensable",
    "compensation",
    "event_type_of",
    "verify",
]


def test_all_is_pinned_and_sorted() -> None:
    assert sagacity.__all__ == PINNED
    assert sagacity.__all__ == sorted(sagacity.__all__, key=lambda n: (not n.isupper(), n))


def test_every_exported_name_exists() -> None:
    for name in sagacity.__all__:
        assert getattr(sagacity, name) is not None


def test_issue_import_line_works() -> None:
    from sagacity import (  # noqa: F401
        CompensationContext,
        InMemoryJournal,
        Reversibility,
        Sagacity,
        SagaResult,
        SagaStatus,
        compensable,
        compensation,
    )


def test_core_imports_no_kafka_postgres_or_http() -> None:
    code = (
        "import sys, sagacity\n"
        "[getattr(sagacity, name) for name in sagacity.__all__]\n"
        "heavy = {'confluent_kafka', 'psycopg', 'fastavro', 'httpx', 'fastapi', 'uvicorn'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
