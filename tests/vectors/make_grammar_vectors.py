"""Write ``grammar-v1.json``: sagas the saga grammar accepts, and sagas that tell impossible
stories, each a hash-valid chain (docs/adr/0005-saga-core-events.md, docs/adr/0017).

Run ``python tests/vectors/make_grammar_vectors.py`` after changing a case: the output is
deterministic (fixed times, salts and writer ids).  The valid cases are the flows the product
journals (each named after the test that journals it); every invalid case breaks one rule.
``findings`` is every finding of :func:`sagacity.chain._grammar.check`, ``(rule, seq)`` in order.
Every ``ERASED`` is signed by the vectors' operator key (``operator_public_key``, derived from a
fixed seed: Ed25519 signatures are deterministic) unless its case says otherwise; ``withheld``
and ``forged`` are read with that key pinned, ``withheld_unpinned`` and ``forged_unpinned``
without a key (docs/adr/0027-operator-signatures.md: signed ones count unverified).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity import EntryDraft, JournalEntry
from sagacity.chain import committing, link, payload_sha256
from sagacity.chain._grammar import check
from sagacity.entries._events import GENESIS_HASH, event_type_of
from sagacity.gate._deadline_extension import extension_reason
from sagacity.privacy._withheld import DataAccount
from sagacity.signing._operator_signature import OperatorSigner, OperatorVerifier

OUT = Path(__file__).with_name("grammar-v1.json")
BASE_US = 1_764_633_600_000_000
AGENT = "host-a:4242:1f2e3d4c"
SERVICE = "sagacity-compensation:svc-1"
APPROVALS = "sagacity-approvals:app-1"

Event = tuple[str, dict[str, Any]]


def _signer(seed: str) -> OperatorSigner:
    raw = hashlib.sha256(seed.encode()).digest()
    return OperatorSigner(Ed25519PrivateKey.from_private_bytes(raw))


OPERATOR = _signer("sagacity grammar vectors: the operator key")
"""The operator key every ``ERASED`` of the vectors is signed with (unless its case forges)."""
OTHER = _signer("sagacity grammar vectors: a key nobody pins")
VERIFIER = OperatorVerifier([OPERATOR.public_raw])


def ev(kind: str, **fields: Any) -> Event:
    return kind, fields


def opened(mode: str = "inline", actor: str = AGENT) -> Event:
    return ev("SAGA_OPENED", actor=actor, attributes={"compensation": mode, "lease_ttl_s": "30"})


def call(tool: str, payload: str, *, rev: str = "COMPENSATABLE", ref: int | None = None) -> Event:
    attributes = {"reversibility": rev}
    if ref is not None:
        attributes["ref_seq"] = str(ref)
    return ev("INTENT", tool=tool, payload=payload, attributes=attributes)


def done(tool: str, ref: int, *, result: str = "ok", rev: str = "COMPENSATABLE") -> Event:
    return ev(
        "EXECUTED",
        tool=tool,
        result=result,
        attributes={"ref_seq": str(ref), "reversibility": rev, "result_encoding": "text"},
    )


def failed(tool: str, ref: int, *, refused: str | None = None) -> Event:
    attributes = {"ref_seq": str(ref), "reversibility": "COMPENSATABLE"}
    if refused is not None:
        attributes["refused"] = refused
    return ev("FAILED", tool=tool, error="RuntimeError: down", attributes=attributes)


def keyed(tool: str, payload: str, key: str = '["$.order_id"]') -> Event:
    """An ``INTENT`` of a tool with an effect key (docs/adr/0026)."""
    return ev(
        "INTENT",
        tool=tool,
        payload=payload,
        attributes={"reversibility": "COMPENSATABLE", "effect_key": key},
    )


def replayed(tool: str, ref: int, payload: str, key: str = '["$.order_id"]') -> Event:
    """A call whose effect key the call (or request) at ``ref`` already has: not run."""
    return ev(
        "REPLAYED",
        tool=tool,
        payload=payload,
        attributes={"ref_seq": str(ref), "reversibility": "COMPENSATABLE", "effect_key": key},
    )


def request(
    tool: str, payload: str, *, rev: str = "IRREVERSIBLE", sigs: str | None = None
) -> Event:
    required = sigs if sigs is not None else ("2" if rev == "PRIVILEGED" else "1")
    return ev(
        "AWAITING_APPROVAL",
        tool=tool,
        payload=payload,
        attributes={
            "payload_sha256": payload_sha256(payload),
            "signatures_required": required,
            "policy_version": "p1",
            "reversibility": rev,
        },
    )


def decision(kind: str, tool: str, ref: int, actor: str | None = None, **extra: Any) -> Event:
    attributes = {"ref_seq": str(ref), "policy_version": "p1", **extra.pop("attributes", {})}
    return ev(kind, tool=tool, actor=actor or APPROVALS, attributes=attributes, **extra)


def approved(tool: str, ref: int, who: str, payload: str) -> Event:
    return decision(
        "APPROVED",
        tool,
        ref,
        actor=who,
        attributes={"payload_sha256": payload_sha256(payload)},
    )


def granted(tool: str, grant_id: str) -> Event:
    """A standing grant of ``tool`` (docs/operations/grants.md); its signature is the acting
    process's to judge, not the grammar's."""
    return ev(
        "GRANTED",
        tool=tool,
        actor="alice@company.com",
        attributes={
            "grant_id": grant_id,
            "grant_rules": '["amount <= 100"]',
            "grant_expires_at_us": str(BASE_US + 3_600_000_000),
            "grant_agent": AGENT,
            "journal": "kafka:vectors/sagacity.journal",
        },
    )


def revoked(tool: str, grant_id: str, grant_seq: int) -> Event:
    return ev(
        "GRANT_REVOKED",
        tool=tool,
        actor="bob@company.com",
        attributes={"grant_id": grant_id, "grant_seq": str(grant_seq)},
    )


def covered(
    tool: str, payload: str, grant_id: str, grant_seq: int, rev: str = "IRREVERSIBLE"
) -> Event:
    """A gated call a standing grant covered: an INTENT naming the grant, no request."""
    return ev(
        "INTENT",
        tool=tool,
        payload=payload,
        attributes={"reversibility": rev, "grant_id": grant_id, "grant_seq": str(grant_seq)},
    )


def escalated(tool: str, ref: int, *, tier: int = 1) -> Event:
    return ev(
        "APPROVAL_ESCALATED",
        tool=tool,
        actor=APPROVALS,
        attributes={"ref_seq": str(ref), "tier": str(tier), "routed_to": "group:finance-leads"},
    )


def extended(tool: str, ref: int, *, by_us: int) -> Event:
    reason = extension_reason(ref, by_us)
    attributes = {"ref_seq": str(ref), "extend_by_us": str(by_us), "reason": reason}
    return ev("DEADLINE_EXTENDED", tool=tool, actor="operator", attributes=attributes)


def ended(status: str, *, actor: str = AGENT, error: str | None = None) -> Event:
    return ev("SAGA_ENDED", actor=actor, result=status, error=error)


def requested(reason: str, ref: int | None = None, **attributes: str) -> Event:
    attrs = {"reason": reason, **attributes}
    if ref is not None:
        attrs["ref_seq"] = str(ref)
    if "handoff" in attrs:
        del attrs["reason"]
    return ev("COMPENSATION_REQUESTED", error="RuntimeError: down", attributes=attrs)


def undo(kind: str, tool: str, ref: int, actor: str = AGENT) -> Event:
    attributes = {"ref_seq": str(ref)}
    if kind == "COMPENSATION_INTENT":
        attributes["compensation"] = f"undo_{tool}"
    elif kind == "COMPENSATED":
        attributes["result_encoding"] = "text"
    else:
        attributes["cause"] = "error"
    return ev(kind, tool=tool, actor=actor, attributes=attributes, result=None)


def suspect(tool: str, ref: int, phase: str, actor: str = SERVICE) -> Event:
    return ev(
        "SUSPECT",
        tool=tool,
        actor=actor,
        error="INTENT without an outcome: an effect may exist; needs a person",
        attributes={"ref_seq": str(ref), "phase": phase},
    )


def settled(tool: str, ref: int, phase: str, outcome: str) -> Event:
    return ev(
        "SUSPECT_SETTLED",
        tool=tool,
        actor="ops@example.com",
        attributes={"ref_seq": str(ref), "phase": phase, "outcome": outcome, "note": "checked"},
    )


def erased(seqs: dict[int, list[str]], *, sign: str = "operator") -> Event:
    """An ``ERASED``: ``sign`` is ``operator`` (the vectors' key), ``other`` (a key nobody
    pins), ``bad`` (the operator's key id, a signature of another message) or ``none``."""
    return ev(
        "ERASED",
        actor="operator:ana@host",
        sign=sign,
        attributes={
            "reason": "art. 17 request",
            "erased": json.dumps({str(k): v for k, v in seqs.items()}, separators=(",", ":")),
            "erased_key": "0123456789abcdef",
        },
    )


def _signed(draft: EntryDraft, how: str, *, seq: int, prev: str) -> EntryDraft:
    if how == "none":
        return draft
    if how == "bad":
        elsewhere = OPERATOR.sign(draft, seq=seq + 1, prev_hash=prev)
        return dataclasses.replace(draft, attributes=dict(elsewhere.attributes))
    return (OTHER if how == "other" else OPERATOR).sign(draft, seq=seq, prev_hash=prev)


RESERVE = '{"product_id":"SKU-9","quantity":2}'
WIRE = '{"amount":"100","to":"alice"}'
GRANT = '{"role":"admin","user":"mallory"}'


def case_events() -> list[dict[str, Any]]:
    """Every case: name, description, events (kind + fields), form, erasure."""
    r, w, g = RESERVE, WIRE, GRANT
    cases: list[dict[str, Any]] = []

    def add(name: str, description: str, events: list[Event], **extra: Any) -> None:
        cases.append({"name": name, "description": description, "events": events, **extra})

    # --- valid: the flows the product journals -------------------------------------------
    add(
        "valid_plain",
        "two calls, completed (tests/core/test_saga.py)",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            done("ship", 4),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_gated_approved_resumed",
        "an IRREVERSIBLE call approved once and resumed (tests/core/test_approval.py)",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 4, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=4),
            done("wire", 7, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "valid_privileged_two_approvals",
        "a PRIVILEGED call signed by two distinct approvers, then resumed",
        [
            opened(),
            request("grant", g, rev="PRIVILEGED"),
            ended("AWAITING_APPROVAL"),
            approved("grant", 2, "alice@company.com", g),
            approved("grant", 2, "bob@company.com", g),
            call("grant", g, rev="PRIVILEGED", ref=2),
            done("grant", 6, rev="PRIVILEGED"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "valid_rejected_inline",
        "a request rejected; the executed step undone in-process",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            decision("REJECTED", "wire", 4, actor="manager@company.com", error="no"),
            undo("COMPENSATION_INTENT", "reserve", 3, APPROVALS),
            undo("COMPENSATED", "reserve", 3, APPROVALS),
            ended("REJECTED", actor=APPROVALS, error="rejected by manager@company.com: no"),
        ],
    )
    add(
        "valid_expired_delegated",
        "a request expired and handed to the compensation service",
        [
            opened("delegated"),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            decision("EXPIRED", "wire", 4, error="expired"),
            requested("EXPIRED", 4),
            ended("COMPENSATION_PENDING", actor=APPROVALS),
            opened("delegated", SERVICE),
            undo("COMPENSATION_INTENT", "reserve", 3, SERVICE),
            undo("COMPENSATED", "reserve", 3, SERVICE),
            ended("EXPIRED", actor=SERVICE),
        ],
    )
    add(
        "valid_failed_inline",
        "a failed call, the step before it undone in-process",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED", error="RuntimeError: down"),
        ],
    )
    add(
        "valid_work_raised_inline",
        "the saga's own code raised (no FAILED on the chain): compensated inline",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED", error="ValueError: bad"),
        ],
    )
    add(
        "valid_failed_delegated",
        "a failed call handed to the compensation service, which opens the saga; its undo"
        " fails, and a later run (Sagacity.compensate after the dead letter) retries it",
        [
            opened("delegated"),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4),
            requested("FAILED", 5),
            ended("COMPENSATION_PENDING"),
            opened("delegated", SERVICE),
            undo("COMPENSATION_INTENT", "reserve", 3, SERVICE),
            undo("COMPENSATION_FAILED", "reserve", 3, SERVICE),
            ended("COMPENSATION_FAILED", actor=SERVICE),
            undo("COMPENSATION_INTENT", "reserve", 3, SERVICE),
            undo("COMPENSATED", "reserve", 3, SERVICE),
            ended("COMPENSATED", actor=SERVICE),
        ],
    )
    add(
        "valid_takeover_suspect_settled",
        "a writer died after an INTENT; taken over, the call suspect, settled executed and undone"
        " (tests/kafka/test_kafka_writer_lease.py, tests/compensation/test_settlement_e2e.py)",
        [
            opened("delegated"),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            requested("", 1, handoff="takeover", abandoned_writer=AGENT),
            opened("delegated", SERVICE),
            suspect("ship", 4, "call"),
            undo("COMPENSATION_INTENT", "reserve", 3, SERVICE),
            undo("COMPENSATED", "reserve", 3, SERVICE),
            ended("COMPENSATION_FAILED", actor=SERVICE),
            settled("ship", 4, "call", "executed"),
            requested("SUSPECT_SETTLED", 4),
            ended("COMPENSATION_PENDING", actor=APPROVALS),
            opened("delegated", SERVICE),
            undo("COMPENSATION_INTENT", "ship", 4, SERVICE),
            undo("COMPENSATED", "ship", 4, SERVICE),
            ended("COMPENSATED", actor=SERVICE),
        ],
    )
    add(
        "valid_undo_in_doubt_settled",
        "an undo interrupted (SUSPECT phase compensation), settled not-executed and called again",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4),
            undo("COMPENSATION_INTENT", "reserve", 3),
            suspect("reserve", 3, "compensation", AGENT),
            ended("COMPENSATION_FAILED"),
            settled("reserve", 3, "compensation", "not-executed"),
            undo("COMPENSATION_INTENT", "reserve", 3, APPROVALS),
            undo("COMPENSATED", "reserve", 3, APPROVALS),
            ended("COMPENSATED", actor=APPROVALS),
        ],
    )
    add(
        "valid_resume_refused",
        "a resume refused (payload changed): journaled, closed, compensated",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 4, "manager@company.com", w),
            decision(
                "RESUME_REFUSED",
                "wire",
                4,
                payload='{"amount":"900","to":"eve"}',
                error="payload changed",
            ),
            undo("COMPENSATION_INTENT", "reserve", 3, APPROVALS),
            undo("COMPENSATED", "reserve", 3, APPROVALS),
            ended("COMPENSATED", actor=APPROVALS),
        ],
    )
    add(
        "valid_constraint_violated",
        "a first call refused by a policy constraint, then a resume refused by it",
        [
            opened(),
            ev(
                "CONSTRAINT_VIOLATED",
                tool="wire",
                payload=w,
                error="[constraint] wire: too much",
                attributes={"policy_version": "p1"},
            ),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 3, "manager@company.com", w),
            decision("CONSTRAINT_VIOLATED", "wire", 3, payload=w, error="[constraint] wire: limit"),
            ended("COMPENSATED", actor=APPROVALS),
        ],
    )
    add(
        "valid_interrupted_resume",
        "a resume stopped after its INTENT: the call suspect, the saga compensated",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 4, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=4),
            suspect("wire", 7, "call", APPROVALS),
            undo("COMPENSATION_INTENT", "reserve", 3, APPROVALS),
            undo("COMPENSATED", "reserve", 3, APPROVALS),
            ended("COMPENSATION_FAILED", actor=APPROVALS),
        ],
    )
    add(
        "valid_oversize_outcome",
        "an outcome too large for the topic, journaled without its bulk (ADR 0005)",
        [
            opened(),
            call("export", "{}"),
            ev(
                "EXECUTED",
                tool="export",
                result=None,
                attributes={
                    "ref_seq": "2",
                    "reversibility": "READ",
                    "result_encoding": "text",
                    "omitted": "result",
                    "omitted_sha256": "0" * 64,
                    "omitted_bytes": "2000000",
                },
            ),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_unknown_event_type",
        "an event type of a newer release between two calls",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            ev("CHECKPOINT_NOTED", actor=AGENT, attributes={"note_id": "7"}),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_repeated_end",
        "a compensation run repeated on a compensated saga finds nothing and ends again",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED"),
            ended("COMPENSATED"),
        ],
    )
    add(
        "valid_erased",
        "an erased saga (form 2): every opening gone, the ERASED event on the chain",
        [
            opened(),
            call("mail", '{"to":"ada@example.org"}'),
            done("mail", 2, result="sent"),
            ended("COMPLETED"),
            erased({2: ["payload"], 3: ["result"], 4: ["result"]}),
        ],
        form=2,
        erase=[2, 3, 4],
    )
    add(
        "valid_sealed_erased_end_unreadable",
        "an erased saga whose final status is erased too: nothing after it is judged by it",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            decision("REJECTED", "wire", 2, actor="manager@company.com", error="no"),
            ended("REJECTED", actor=APPROVALS),
            erased({2: ["payload"], 3: ["result"]}),
        ],
        form=2,
        erase=[2, 3, 4, 5],
    )
    add(
        "valid_anchored",
        "a chain held from after a retention anchor: references before it are not judged, and"
        " a step whose INTENT precedes it is a step (undone here)",
        [
            call("ship", "{}"),
            done("ship", 2),
            done("reserve", 1),
            undo("COMPENSATION_INTENT", "reserve", 4),
            undo("COMPENSATED", "reserve", 4),
            ended("COMPENSATED"),
        ],
        after_seq=1,
    )
    add(
        "valid_writer_named",
        "events naming their writer (the Kafka journal's writer attribute)",
        [opened(), call("reserve", r), done("reserve", 2), ended("COMPLETED")],
        writer=AGENT,
    )
    order = '{"order_id":"o-7","amount":"20"}'
    add(
        "valid_replayed_effect",
        "a call whose effect key an executed call has: REPLAYED, not run, the saga completes"
        " (tests/core/test_effects.py)",
        [
            opened(),
            keyed("charge", order),
            done("charge", 2),
            replayed("charge", 2, order),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_replayed_request",
        "a gated call made again while its request is open: REPLAYED of the request",
        [
            opened(),
            request("wire", w),
            replayed("wire", 2, w, key="*"),
            ended("AWAITING_APPROVAL"),
            approved("wire", 2, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 6, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "valid_effect_conflict",
        "the same effect key with other arguments: refused (CONSTRAINT_VIOLATED, effect_of)",
        [
            opened(),
            keyed("charge", order),
            done("charge", 2),
            ev(
                "CONSTRAINT_VIOLATED",
                tool="charge",
                payload='{"order_id":"o-7","amount":"99"}',
                error="[effect] charge: the call at seq 2 already had this effect",
                attributes={
                    "policy_version": "p1",
                    "effect_key": '["$.order_id"]',
                    "effect_of": "2",
                },
            ),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_refusal_then_retry",
        "a tool that refused before acting (FAILED refused), called again: the saga completes"
        " and nothing asks for compensation",
        [
            opened("delegated"),
            call("ship", "{}"),
            failed("ship", 2, refused="retry"),
            call("ship", '{"carrier":"dhl"}'),
            done("ship", 4),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_recovered_failure",
        "a failed call recovered by a later success of the same tool: no compensation",
        [
            opened("delegated"),
            call("ship", "{}"),
            failed("ship", 2),
            call("ship", "{}"),
            ev(
                "EXECUTED",
                tool="ship",
                result="ok",
                attributes={
                    "ref_seq": "4",
                    "reversibility": "COMPENSATABLE",
                    "result_encoding": "text",
                    "recovers": "3",
                },
            ),
            ended("COMPLETED"),
        ],
    )
    add(
        "valid_effect_in_doubt_continued",
        "a writer stopped after an INTENT and continued the conversation: the replayed call in"
        " doubt (SUSPECT by the agent), the saga handed to compensation at its end"
        " (tests/kafka/test_effects_restart.py)",
        [
            opened("delegated"),
            keyed("charge", order),
            suspect("charge", 2, "call", AGENT),
            requested("FAILED", 2),
            ended("COMPENSATION_PENDING"),
            opened("delegated", SERVICE),
            ended("COMPENSATION_FAILED", actor=SERVICE),
            settled("charge", 2, "call", "not-executed"),
            requested("SUSPECT_SETTLED", 2),
            ended("COMPENSATION_PENDING", actor=APPROVALS),
            opened("delegated", SERVICE),
            ended("COMPENSATED", actor=SERVICE),
        ],
    )

    # --- impossible stories --------------------------------------------------------------
    add(
        "executed_without_intent",
        "the issue's attack: an EXECUTED of a PRIVILEGED request's tool with no INTENT",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("grant", g, rev="PRIVILEGED"),
            ended("AWAITING_APPROVAL"),
            done("grant", 4, rev="PRIVILEGED"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "executed_without_ref",
        "an EXECUTED that names no INTENT",
        [opened(), ev("EXECUTED", tool="grant", result="ok", attributes={}), ended("COMPLETED")],
    )
    add(
        "executed_twice",
        "two outcomes of one INTENT",
        [opened(), call("reserve", r), done("reserve", 2), done("reserve", 2), ended("COMPLETED")],
    )
    add(
        "executed_another_tool",
        "an EXECUTED for another tool than its INTENT's",
        [opened(), call("reserve", r), done("grant", 2), ended("COMPLETED")],
    )
    add(
        "gated_without_request",
        "an INTENT of a PRIVILEGED tool that resumes no request",
        [
            opened(),
            call("grant", g, rev="PRIVILEGED"),
            done("grant", 2, rev="PRIVILEGED"),
            ended("COMPLETED"),
        ],
    )
    add(
        "privileged_one_approval",
        "a PRIVILEGED request resumed with one approval",
        [
            opened(),
            request("grant", g, rev="PRIVILEGED"),
            ended("AWAITING_APPROVAL"),
            approved("grant", 2, "alice@company.com", g),
            call("grant", g, rev="PRIVILEGED", ref=2),
            done("grant", 5, rev="PRIVILEGED"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "privileged_same_approver_twice",
        "a PRIVILEGED request 'signed' twice by the same approver",
        [
            opened(),
            request("grant", g, rev="PRIVILEGED"),
            ended("AWAITING_APPROVAL"),
            approved("grant", 2, "alice@company.com", g),
            approved("grant", 2, "alice@company.com", g),
            call("grant", g, rev="PRIVILEGED", ref=2),
            done("grant", 6, rev="PRIVILEGED"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "privileged_lowered_count",
        "a PRIVILEGED request journaling signatures_required 1, resumed with one approval",
        [
            opened(),
            request("grant", g, rev="PRIVILEGED", sigs="1"),
            ended("AWAITING_APPROVAL"),
            approved("grant", 2, "alice@company.com", g),
            call("grant", g, rev="PRIVILEGED", ref=2),
            done("grant", 5, rev="PRIVILEGED"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "irreversible_no_approval",
        "an IRREVERSIBLE request resumed with no approval at all",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 4, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "resumed_another_payload",
        "a request resumed with another payload than the one approved",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 2, "manager@company.com", w),
            call("wire", '{"amount":"900","to":"eve"}', rev="IRREVERSIBLE", ref=2),
            done("wire", 5, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "resumed_another_tool",
        "a request resumed by a call of another tool",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 2, "manager@company.com", w),
            call("grant", w, rev="IRREVERSIBLE", ref=2),
            done("grant", 5, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "resume_of_no_request",
        "an INTENT resuming a seq that is no request",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("wire", w, rev="IRREVERSIBLE", ref=3),
            done("wire", 4, rev="IRREVERSIBLE"),
            ended("COMPLETED"),
        ],
    )
    add(
        "resume_after_reject",
        "a rejected request resumed anyway",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 2, "manager@company.com", w),
            decision("REJECTED", "wire", 2, actor="cfo@company.com", error="no"),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 6, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "resumed_twice",
        "one approval, two resumes: the call runs twice",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            approved("wire", 2, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 5, rev="IRREVERSIBLE"),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 7, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "approval_of_no_request",
        "an APPROVED that refers to an executed step",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            approved("reserve", 3, "manager@company.com", r),
            ended("COMPLETED"),
        ],
    )
    add(
        "compensation_in_a_delegated_run",
        "a delegated run undoing a step with nothing asking for it",
        [
            opened("delegated"),
            call("reserve", r),
            done("reserve", 2),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED"),
        ],
    )
    add(
        "compensation_while_awaiting",
        "an undo after the run ended awaiting approval, with no decision",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            undo("COMPENSATION_INTENT", "reserve", 3, APPROVALS),
            undo("COMPENSATED", "reserve", 3, APPROVALS),
            ended("COMPENSATED", actor=APPROVALS),
        ],
    )
    add(
        "undo_of_a_call_that_never_ran",
        "a failed call 'undone'",
        [
            opened(),
            call("reserve", r),
            failed("reserve", 2),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED"),
        ],
    )
    add(
        "compensated_without_intent",
        "a step recorded undone with no COMPENSATION_INTENT before it",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED"),
        ],
    )
    add(
        "settlement_of_no_suspect",
        "a SUSPECT_SETTLED for a step no SUSPECT doubted",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATION_FAILED", "reserve", 3),
            ended("COMPENSATION_FAILED"),
            settled("ship", 4, "call", "executed"),
        ],
    )
    add(
        "call_after_completed",
        "a tool called after the saga ended COMPLETED",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            ended("COMPLETED"),
            call("wire", w),
            done("wire", 5),
        ],
    )
    add(
        "decision_after_compensation_failed",
        "an approval after the saga ended COMPENSATION_FAILED",
        [
            opened(),
            request("wire", w),
            ended("AWAITING_APPROVAL"),
            requested("FAILED", 2),
            ended("COMPENSATION_PENDING"),
            opened("delegated", SERVICE),
            ended("COMPENSATION_FAILED", actor=SERVICE),
            approved("wire", 2, "manager@company.com", w),
        ],
    )
    add(
        "erased_while_awaiting",
        "an ERASED while a request is pending",
        [opened(), request("wire", w), ended("AWAITING_APPROVAL"), erased({2: ["payload"]})],
    )
    mail = [
        opened(),
        call("mail", '{"to":"ada@example.org"}'),
        done("mail", 2, result="sent"),
        ended("COMPLETED"),
    ]
    listing = {2: ["payload"], 3: ["result"], 4: ["result"]}
    add(
        "erased_unsigned",
        "an ERASED no operator signed (any writer may append one): it does not count, so the"
        " data it claims erased is withheld, with or without a pinned key",
        [*mail, erased(listing, sign="none")],
        form=2,
        erase=[2, 3, 4],
    )
    add(
        "erased_other_key",
        "an ERASED signed by a key nobody pins: withheld where the operator key is pinned,"
        " counted unverified where none is",
        [*mail, erased(listing, sign="other")],
        form=2,
        erase=[2, 3, 4],
    )
    add(
        "erased_bad_signature",
        "an ERASED whose operator signature is for another place in the chain",
        [*mail, erased(listing, sign="bad")],
        form=2,
        erase=[2, 3, 4],
    )
    add(
        "erased_forged_then_operator",
        "a forged ERASED, then the operator's: the data is erased, the forgery still reported",
        [*mail, erased({}, sign="none"), erased(listing)],
        form=2,
        erase=[2, 3, 4],
    )
    add(
        "ref_forward",
        "an EXECUTED that refers to a later seq",
        [opened(), done("reserve", 4), call("reserve", r), ended("COMPLETED")],
    )
    add(
        "withheld",
        "form-2 openings removed without an erasure: the chain verifies, the data is withheld",
        [
            opened(),
            call("mail", '{"to":"ada@example.org"}'),
            done("mail", 2, result="sent"),
            ended("COMPLETED"),
        ],
        form=2,
        erase=[2, 3],
    )
    add(
        "replay_of_a_failed_call",
        "a REPLAYED of a call that failed: no effect to replay",
        [
            opened(),
            keyed("charge", order),
            failed("charge", 2),
            replayed("charge", 2, order),
            ended("COMPLETED"),
        ],
    )
    add(
        "replay_of_another_tool",
        "a REPLAYED naming another tool's executed call",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            replayed("charge", 2, order),
            ended("COMPLETED"),
        ],
    )
    add(
        "replay_after_end",
        "a REPLAYED after the saga's run ended, with no SAGA_OPENED since",
        [
            opened(),
            keyed("charge", order),
            done("charge", 2),
            ended("AWAITING_APPROVAL"),
            replayed("charge", 2, order),
        ],
    )
    add(
        "compensation_after_a_refusal",
        "a refusal before acting asks for no compensation: undoing a step after it, with no"
        " request, in a delegated saga",
        [
            opened("delegated"),
            call("reserve", r),
            done("reserve", 2),
            call("ship", "{}"),
            failed("ship", 4, refused="declared"),
            undo("COMPENSATION_INTENT", "reserve", 3),
            undo("COMPENSATED", "reserve", 3),
            ended("COMPENSATED"),
        ],
    )
    # --- standing grants (docs/operations/grants.md) ------------------------------------
    small = '{"amount":"50","to":"alice"}'
    asked = [opened(), request("wire", w)]
    add(
        "valid_granted_call",
        "a conversation's wire asked for, the tool granted, a later wire run under the grant"
        " (tests/grants/test_grants_kafka.py)",
        [
            *asked,
            granted("wire", "g1"),
            covered("wire", small, "g1", 3),
            done("wire", 4, rev="IRREVERSIBLE"),
        ],
    )
    add(
        "valid_granted_then_revoked",
        "a grant used, revoked, and the next wire asked for again",
        [
            *asked,
            granted("wire", "g1"),
            covered("wire", small, "g1", 3),
            done("wire", 4, rev="IRREVERSIBLE"),
            revoked("wire", "g1", 3),
            request("wire", small),
        ],
    )
    add(
        "granted_call_after_revocation",
        "a wire run under a grant revoked before it",
        [*asked, granted("wire", "g1"), revoked("wire", "g1", 3), covered("wire", small, "g1", 3)],
    )
    add(
        "granted_call_of_no_grant",
        "a wire naming a grant seq that is no GRANTED",
        [*asked, covered("wire", small, "g1", 2)],
    )
    add(
        "granted_call_of_another_tool",
        "a wire naming a grant of another tool",
        [*asked, granted("refund", "g1"), covered("wire", small, "g1", 3)],
    )
    add(
        "granted_privileged_call",
        "a PRIVILEGED call run under a grant: never granted",
        [
            opened(),
            request("grant", g, rev="PRIVILEGED"),
            granted("grant", "g1"),
            covered("grant", g, "g1", 3, rev="PRIVILEGED"),
        ],
    )
    add(
        "granted_after_end",
        "a grant after the saga ended COMPLETED",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            ended("COMPLETED"),
            granted("wire", "g1"),
        ],
    )
    # --- the gate's own notes: escalations, extensions, refused approvals -----------------
    noted = [
        opened(),
        request("wire", w),
        ended("AWAITING_APPROVAL"),
        escalated("wire", 2, tier=1),
        extended("wire", 2, by_us=7_200_000_000),
        decision("APPROVAL_REFUSED", "wire", 2, actor="eve@company.com", error="hash mismatch"),
    ]
    add(
        "valid_escalated_extended_then_approved",
        "a request escalated, its deadline extended, a decision refused (not the request shown),"
        " then approved and resumed (tests/approvals/test_routing.py)",
        [
            *noted,
            approved("wire", 2, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 8, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "resumed_twice_after_gate_notes",
        "the gate's notes keep the request known: one approval, two resumes",
        [
            *noted,
            approved("wire", 2, "manager@company.com", w),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 8, rev="IRREVERSIBLE"),
            call("wire", w, rev="IRREVERSIBLE", ref=2),
            done("wire", 10, rev="IRREVERSIBLE"),
            ended("COMPLETED", actor=APPROVALS),
        ],
    )
    add(
        "escalated_after_end",
        "an escalation after the saga ended COMPLETED",
        [
            opened(),
            call("reserve", r),
            done("reserve", 2),
            ended("COMPLETED"),
            escalated("wire", 2),
        ],
    )
    add(
        "writer_named_in_finding",
        "an impossible event naming its writer: the finding names it",
        [opened(), ev("EXECUTED", tool="grant", result="ok", attributes={}), ended("COMPLETED")],
        writer="rogue-writer",
    )
    return cases


def build(case: dict[str, Any]) -> dict[str, Any]:
    """The case's events as a hash-valid chain, its findings and its data account."""
    saga_id = f"grammar-{case['name'].replace('_', '-')}"
    after = case.get("after_seq", 0)
    form = case.get("form", 1)
    prev = hashlib.sha256(f"anchor of {saga_id}".encode()).hexdigest() if after else GENESIS_HASH
    chain: list[JournalEntry] = []
    counter = 0

    def salt(name: str) -> bytes:
        return hashlib.sha256(f"{saga_id}:{counter}:{name}".encode()).digest()

    for i, (kind, fields) in enumerate(case["events"]):
        seq = after + i + 1
        counter = seq
        attributes = dict(fields.get("attributes", {}))
        if case.get("writer"):
            attributes["writer"] = case["writer"]
        draft = EntryDraft(
            saga_id=saga_id,
            event_type=event_type_of(kind),
            tool=fields.get("tool"),
            payload=fields.get("payload"),
            result=fields.get("result"),
            error=fields.get("error"),
            actor=fields.get("actor", AGENT),
            attributes=attributes,
            recorded_at_us=BASE_US + seq * 1_000,
        )
        if form == 2:
            draft = committing(draft, salt=salt)
        if kind == "ERASED":
            draft = _signed(draft, fields.get("sign", "operator"), seq=seq, prev=prev)
        entry = link(draft, seq=seq, prev_hash=prev)
        if seq in case.get("erase", ()):
            entry = _erase(entry)
        chain.append(entry)
        prev = entry.hash
    findings = check(chain, after_seq=after)
    account, unpinned = _account(chain, VERIFIER), _account(chain, None)
    withheld, withheld_unpinned = account.withheld, unpinned.withheld
    return {
        "name": case["name"],
        "description": case["description"],
        "saga_id": saga_id,
        "after_seq": after,
        "anchor_hash": chain[0].prev_hash if after else None,
        "events": [e.to_dict() for e in chain],
        "findings": [[f.rule.value, f.seq] for f in findings],
        "writer": findings[0].writer if findings else None,
        "withheld": None if withheld is None else withheld[0],
        "forged": [[seq, why] for seq, why, _writer in account.forged],
        "withheld_unpinned": None if withheld_unpinned is None else withheld_unpinned[0],
        "forged_unpinned": [[seq, why] for seq, why, _writer in unpinned.forged],
        "erased_fields": account.erased_fields,
    }


def _account(chain: list[JournalEntry], operator: OperatorVerifier | None) -> DataAccount:
    account = DataAccount(operator=operator)
    for e in chain:
        if e.event_type == "ERASED":
            account.erasure(e)
        account.feed(e.seq, e.event_type, e.attributes, e.commitments, e.salts)
    return account


def _erase(entry: JournalEntry) -> JournalEntry:
    """The entry with every opening removed (what an erasure, or a withholding, leaves)."""
    data = {k: v for k, v in entry.attributes.items() if k not in entry.commitments}
    return dataclasses.replace(
        entry,
        payload=None if "payload" in entry.commitments else entry.payload,
        result=None if "result" in entry.commitments else entry.result,
        error=None if "error" in entry.commitments else entry.error,
        attributes=data,
        salts={},
    )


def main(write: Callable[[str], object] = OUT.write_text) -> None:
    document = {
        "form": "sagacity-grammar/1",
        "description": (
            "Saga grammar vectors (docs/adr/0005-saga-core-events.md, docs/adr/0017-audit-"
            "coverage.md): each case is one saga's hash-valid chain in seq order (after_seq: the"
            " chain starts after a retention anchor whose hash is anchor_hash), with every"
            " finding of the saga grammar as [rule, seq] (none for a valid saga), the writer the"
            " first finding names, the first seq whose data is withheld (a form-2 opening"
            " missing with no ERASED that counts on the chain) and the ERASED events that do"
            " not count ([seq, reason]: forged), with operator_public_key pinned and (the"
            " _unpinned fields) without a key, when an ERASED with an operator signature counts"
            " unverified. Generated by make_grammar_vectors.py."
        ),
        "operator_public_key": OPERATOR.public_hex,
        "cases": [build(case) for case in case_events()],
    }
    write(_render(document))


def _render(document: dict[str, Any]) -> str:
    """JSON with one line per event (diffs stay readable, the file small)."""

    def dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)

    cases = []
    for case in document["cases"]:
        fields = [f" {dumps(k)}: {dumps(v)}" for k, v in case.items() if k != "events"]
        events = ",\n".join(f"   {dumps(e)}" for e in case["events"])
        cases.append("{\n" + ",\n".join(fields) + ',\n "events": [\n' + events + "\n ]\n}")
    head = ",\n".join(f"{dumps(k)}: {dumps(v)}" for k, v in document.items() if k != "cases")
    return "{\n" + head + ',\n"cases": [\n' + ",\n".join(cases) + "\n]\n}\n"


if __name__ == "__main__":
    main()
