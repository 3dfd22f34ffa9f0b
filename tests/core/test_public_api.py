"""The public API is exported deliberately: pinned here so a change is a conscious one."""

from __future__ import annotations

import inspect
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


# Every public member of ``Sagacity`` with its signature (properties by name): the class's body
# is spread over modules by concept (the gate's delegations, the saga's ends), its API is not.
SAGACITY_MEMBERS = {
    "approval_deadline_us": (
        "(self, request: 'ApprovalRequest', *, seen_at_us: 'int | None' = None, entries: "
        "'Sequence[JournalEntry] | None' = None) -> 'int | None'"
    ),
    "approval_trust": "property",
    "approval_ttl_us": "property",
    "approve": (
        "(self, saga_id: 'str', seq: 'int', approver: 'str', *, request_hash: 'str | None' = "
        "None) -> 'ApprovalRequest'"
    ),
    "compensate": (
        "(self, saga_id: 'str', *, reason: 'EventType' = <EventType.FAILED: 'FAILED'>, error:"
        " 'str | None' = None, invoke: 'Callable[[CompensationCall], Any] | None' = None) -> "
        "'SagaResult'"
    ),
    "compensation_mode": "property",
    "compensation_report": "(self, saga_id: 'str') -> 'CompensationReport'",
    "conversation": "(self, conversation_id: 'str') -> 'SagaRun'",
    "covering_grant": (
        "(self, definition: 'ToolDefinition', saga_id: 'str', payload: 'str') -> 'GrantUse | None'"
    ),
    "counted_signers": (
        "(self, entries: 'Sequence[JournalEntry]', request: 'ApprovalRequest') -> 'set[str]'"
    ),
    "decision_signer": "property",
    "decision_verifier": "property",
    "end_saga": (
        "(self, saga_id: 'str', *, cause: 'EventType', ref_seq: 'int | None', error: 'str | "
        "None', clean_status: 'SagaStatus', report: 'CompensationReport | None', value: 'Any'"
        " = None, exception: 'BaseException | None' = None, redacted: 'Collection[str]' = ())"
        " -> 'SagaResult'"
    ),
    "entries": "(self, saga_id: 'str') -> 'Sequence[JournalEntry]'",
    "expire": (
        "(self, saga_id: 'str', seq: 'int', *, seen_at_us: 'int | None' = None) -> 'SagaResult'"
    ),
    "expire_overdue": "(self) -> 'list[SagaResult]'",
    "finish_run": (
        "(self, scope: 'SagaScope', value: 'Any', error: 'Exception | None') -> 'SagaResult'"
    ),
    "from_env": "(**options: 'Any') -> 'Sagacity'",
    "grant": (
        "(self, saga_id: 'str', tool: 'str', rules: 'Sequence[str]', *, expires_at_us: 'int', "
        "grantor: 'str') -> 'GrantView'"
    ),
    "grants": "(self, saga_id: 'str') -> 'list[GrantView]'",
    "journal": "property",
    "journal_identity": "property",
    "now_us": "(self) -> 'int'",
    "open_run": "(self, saga_id: 'str') -> 'SagaRun'",
    "outcome": "(self, saga_id: 'str') -> 'SagaResult | None'",
    "pending_approvals": "(self, saga_id: 'str | None' = None) -> 'Sequence[ApprovalRequest]'",
    "policy_version": "property",
    "registry": "property",
    "reject": (
        "(self, saga_id: 'str', seq: 'int', approver: 'str', *, reason: 'str | None' = None) "
        "-> 'SagaResult'"
    ),
    "resume_saga": (
        "(self, saga_id: 'str', seq: 'int', payload: 'str', *, requested_by: 'str | None' = "
        "None) -> 'SagaResult'"
    ),
    "resume_saga_async": (
        "(self, saga_id: 'str', seq: 'int', payload: 'str', *, requested_by: 'str | None' = "
        "None) -> 'SagaResult'"
    ),
    "revoke_grant": ("(self, saga_id: 'str', grant_id: 'str', principal: 'str') -> 'GrantView'"),
    "saga": "(self, saga_id: 'str', work: 'Callable[[], Any]') -> 'SagaResult'",
    "saga_async": "(self, saga_id: 'str', work: 'Callable[[], Awaitable[Any]]') -> 'SagaResult'",
    "settle": (
        "(self, saga_id: 'str', seq: 'int', outcome: 'str', person: 'str', *, note: 'str') ->"
        " 'SagaResult'"
    ),
    "settlement_counts": "(self, entry: 'JournalEntry') -> 'bool'",
    "wait_for_outcome": (
        "(self, saga_id: 'str', *, timeout: 'float' = 30.0, poll_interval: 'float' = 0.05) ->"
        " 'SagaResult'"
    ),
    "wait_for_outcome_async": (
        "(self, saga_id: 'str', *, timeout: 'float' = 30.0, poll_interval: 'float' = 0.05) ->"
        " 'SagaResult'"
    ),
    "wrap": "(self, obj: '_T') -> '_T'",
    "wrap_tool": (
        "(self, function: 'Callable[..., Any]', *, name: 'str | None' = None, reversibility: "
        "'Reversibility' = <Reversibility.COMPENSATABLE: 'COMPENSATABLE'>, by: 'Callable[...,"
        " Any] | None' = None, constraint: 'Constraint | None' = None, undo: 'UndoCall | "
        "None' = None, redact: 'Sequence[str]' = (), undo_tools: 'Sequence[str]' = (), "
        "effect_key: 'Sequence[str] | object | None' = DEFAULT_KEY, refuses: "
        "'Sequence[type[BaseException]]' = (), grantable: 'bool' = True) -> "
        "'Callable[..., Any]'"
    ),
    "writer_id": "property",
}
SAGACITY_INIT = (
    "(self, journal: 'Journal | None' = None, *, compensation: 'CompensationMode' = 'inline',"
    " approval_ttl: 'timedelta | float | None' = None, policy_version: 'str' = '1', "
    "writer_id: 'str | None' = None, clock: 'Callable[[], int] | None' = None, "
    "decision_signer: 'DecisionSigner | None' = None, approvals_public_key: 'str | "
    "DecisionVerifier | None' = None, approver_groups: 'ApproverGroups | None' = None, "
    "operator_public_key: 'OperatorVerifier | None' = None) -> 'None'"
)


def test_the_sagacity_class_is_pinned() -> None:
    members = {}
    for name in sorted(n for n in dir(sagacity.Sagacity) if not n.startswith("_")):
        found = inspect.getattr_static(sagacity.Sagacity, name)
        members[name] = (
            "property"
            if isinstance(found, property)
            else str(inspect.signature(getattr(sagacity.Sagacity, name)))
        )
        assert (getattr(sagacity.Sagacity, name).__doc__ or "").strip(), f"{name}: no docstring"
    assert members == SAGACITY_MEMBERS
    assert str(inspect.signature(sagacity.Sagacity.__init__)) == SAGACITY_INIT


CHAIN_PINNED = [
    # The public names ``sagacity.chain`` had as one module: the package keeps every one of
    # them (its rooms, ``sagacity.chain._*``, are private).
    "CANONICAL_MAGIC",
    "CANONICAL_MAGIC_V2",
    "COMMITMENT_MAGIC",
    "DATA_ATTRIBUTES",
    "GENESIS_HASH",
    "SALT_BYTES",
    "BreakReason",
    "ChainVerdict",
    "EntryDraft",
    "JournalEntry",
    "SerializationError",
    "canonical_bytes",
    "canonical_bytes_of",
    "canonical_bytes_v2_of",
    "canonical_layout",
    "commitment",
    "committed",
    "committing",
    "compute_hash",
    "framed",
    "hash_of",
    "link",
    "link_break",
    "payload_sha256",
    "verify",
]


def test_the_chain_package_keeps_the_chain_modules_public_names() -> None:
    import sagacity.chain as chain

    assert chain.__all__ == CHAIN_PINNED
    public = {n for n in vars(chain) if not n.startswith("_") and n != "annotations"}
    assert public == set(CHAIN_PINNED)
    for name in CHAIN_PINNED:
        assert getattr(chain, name) is not None, name
    assert sagacity.verify is chain.verify
    assert sagacity.BreakReason is chain.BreakReason
