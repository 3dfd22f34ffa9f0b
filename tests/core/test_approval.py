"""Approval gates: request, approve, resume bound to the exact payload; every check fails closed."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    EventType,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
    verify,
)
from sagacity.chain import payload_sha256
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFound,
    ChainIntegrityError,
    ConstraintViolation,
    InvalidArgumentError,
    PayloadMismatchError,
    UnknownSagaError,
    UnverifiableApprovalError,
)

from .conftest import kinds, only

E = EventType
ALICE = '{"amount":"100","to":"alice"}'
MALLORY = '{"amount":"999999","to":"mallory"}'


class Bank:
    def __init__(self) -> None:
        self.wires: list[tuple[str, str]] = []
        self.reserved: list[str] = []
        self.released: list[CompensationContext] = []
        self.grants: list[tuple[str, str]] = []

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str) -> str:
        self.reserved.append(sku)
        return f"held-{sku}"

    @compensation
    def release_inventory(self, context: CompensationContext) -> None:
        self.released.append(context)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        self.wires.append((amount, to))
        return "transfer-ok"

    @compensable(
        reversibility=Reversibility.PRIVILEGED,
        constraint=lambda args: (
            "granting the admin role is not delegated to an agent"
            if args.get("role") == "admin"
            else None
        ),
    )
    def grant_agent_access(self, principal: str, role: str) -> str:
        self.grants.append((principal, role))
        return f"granted {role}"


@pytest.fixture
def bank() -> Bank:
    return Bank()


@pytest.fixture
def banking(sagacity: Sagacity, bank: Bank) -> Any:
    return sagacity.wrap(bank)


def _gate(sagacity: Sagacity, banking: Any, saga_id: str = "transfer-77") -> int:
    def work() -> None:
        banking.reserve_inventory("SKU-9")
        banking.send_wire_transfer("100", "alice")

    result = sagacity.saga(saga_id, work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    return result.awaiting_seq


def test_three_step_flow_and_what_ends_up_in_the_journal(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    seq = _gate(sagacity, banking)
    (pending,) = sagacity.pending_approvals()
    assert (pending.seq, pending.tool, pending.payload) == (seq, "send_wire_transfer", ALICE)
    request = sagacity.approve("transfer-77", seq, "manager@company.com")
    assert request.approved
    assert request.signed_by == ("manager@company.com",)
    assert bank.wires == []  # approving is not executing
    result = sagacity.resume_saga("transfer-77", seq, ALICE)
    assert result.status is SagaStatus.COMPLETED
    assert result.value == "transfer-ok"
    assert bank.wires == [("100", "alice")]
    entries = sagacity.journal.entries("transfer-77")
    assert kinds(entries) == [
        (E.SAGA_OPENED, None),
        (E.INTENT, "reserve_inventory"),
        (E.EXECUTED, "reserve_inventory"),
        (E.AWAITING_APPROVAL, "send_wire_transfer"),
        (E.SAGA_ENDED, None),
        (E.APPROVED, "send_wire_transfer"),
        (E.INTENT, "send_wire_transfer"),
        (E.EXECUTED, "send_wire_transfer"),
        (E.SAGA_ENDED, None),
    ]
    approved, intent, executed = entries[5], entries[6], entries[7]
    assert approved.actor == "manager@company.com"
    assert approved.ref_seq == seq
    assert approved.attributes["policy_version"] == "1"
    assert approved.attributes["payload_sha256"] == payload_sha256(ALICE)
    assert intent.ref_seq == seq
    assert intent.payload == ALICE  # the thing executed is the thing approved
    assert executed.result == "transfer-ok"
    assert entries[-1].result == "COMPLETED"
    assert sagacity.pending_approvals() == []
    assert verify(entries).ok


def test_stale_approval_attack_is_refused_journaled_and_compensated(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "manager@company.com")
    with pytest.raises(PayloadMismatchError, match="payload changed since approval") as info:
        sagacity.resume_saga("transfer-77", seq, MALLORY)
    assert bank.wires == []  # the wire tool was never called
    assert [c.result for c in bank.released] == ["held-SKU-9"]  # prior steps compensated
    assert info.value.result is not None
    assert info.value.result.status is SagaStatus.COMPENSATED
    entries = sagacity.journal.entries("transfer-77")
    refused = only(entries, E.RESUME_REFUSED)[0]
    assert refused.ref_seq == seq
    assert refused.payload == MALLORY  # what was attempted is evidence too
    assert refused.error == "payload changed since approval"
    assert refused.attributes["payload_sha256"] == payload_sha256(MALLORY)
    assert (E.INTENT, "send_wire_transfer") not in kinds(entries)
    assert sagacity.pending_approvals("transfer-77") == []
    # The request is gone: the right payload cannot be slipped in afterwards either.
    with pytest.raises(ApprovalNotFound):
        sagacity.resume_saga("transfer-77", seq, ALICE)
    assert bank.wires == []


def test_who_asked_for_a_resume_is_journaled_on_the_refusal_and_on_the_intent(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    seq = _gate(sagacity, banking, "t-who")
    sagacity.approve("t-who", seq, "manager@company.com")
    with pytest.raises(PayloadMismatchError):
        sagacity.resume_saga("t-who", seq, MALLORY, requested_by="mallory@example.com")
    [refused] = only(sagacity.journal.entries("t-who"), E.RESUME_REFUSED)
    assert refused.attributes["requested_by"] == "mallory@example.com"

    seq = _gate(sagacity, banking, "t-who-2")
    sagacity.approve("t-who-2", seq, "manager@company.com")
    sagacity.resume_saga("t-who-2", seq, ALICE, requested_by="manager@company.com")
    entries = sagacity.journal.entries("t-who-2")
    wire_intent = [e for e in only(entries, E.INTENT) if e.tool == "send_wire_transfer"]
    assert [e.attributes["requested_by"] for e in wire_intent] == ["manager@company.com"]
    assert verify(entries).ok


@pytest.mark.parametrize("who", ["", "   ", 7])
def test_resume_refuses_a_blank_requester_before_journaling(
    sagacity: Sagacity, banking: Any, bank: Bank, who: Any
) -> None:
    seq = _gate(sagacity, banking, "t-blank")
    sagacity.approve("t-blank", seq, "manager@company.com")
    before = len(sagacity.journal.entries("t-blank"))
    with pytest.raises(InvalidArgumentError, match="requested_by"):
        sagacity.resume_saga("t-blank", seq, ALICE, requested_by=who)
    assert len(sagacity.journal.entries("t-blank")) == before
    assert bank.wires == []


def test_whitespace_reformat_is_refused(sagacity: Sagacity, banking: Any, bank: Bank) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "manager@company.com")
    with pytest.raises(PayloadMismatchError, match="payload changed since approval"):
        sagacity.resume_saga("transfer-77", seq, '{ "amount": "100", "to": "alice" }')
    assert bank.wires == []


def test_resume_without_a_journaled_approval_is_refused(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    seq = _gate(sagacity, banking)
    with pytest.raises(ApprovalMissingError, match="no human approval recorded"):
        sagacity.resume_saga("transfer-77", seq, ALICE)
    assert bank.wires == []
    assert len(sagacity.pending_approvals("transfer-77")) == 1  # still decidable
    sagacity.approve("transfer-77", seq, "manager@company.com")
    assert sagacity.resume_saga("transfer-77", seq, ALICE).status is SagaStatus.COMPLETED


def test_request_without_a_stored_hash_is_refused(
    journal: InMemoryJournal, sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    from sagacity import EntryDraft

    sagacity.saga("damaged", lambda: banking.reserve_inventory("S"))
    request = journal.append(
        EntryDraft(
            saga_id="damaged",
            event_type=E.AWAITING_APPROVAL,
            tool="send_wire_transfer",
            payload=ALICE,
            attributes={"signatures_required": "1"},
        )
    )
    sagacity.approve("damaged", request.seq, "manager@company.com")
    with pytest.raises(UnverifiableApprovalError):
        sagacity.resume_saga("damaged", request.seq, ALICE)
    assert bank.wires == []
    assert only(journal.entries("damaged"), E.RESUME_REFUSED)
    assert [c.result for c in bank.released] == ["held-S"]


def test_reject_compensates_and_drops_the_request(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    seq = _gate(sagacity, banking)
    result = sagacity.reject("transfer-77", seq, "manager@company.com", reason="wrong account")
    assert result.status is SagaStatus.REJECTED
    assert [c.result for c in bank.released] == ["held-SKU-9"]
    rejected = only(sagacity.journal.entries("transfer-77"), E.REJECTED)[0]
    assert rejected.actor == "manager@company.com"
    assert rejected.ref_seq == seq
    assert rejected.error == "wrong account"
    assert rejected.attributes["policy_version"] == "1"
    assert sagacity.pending_approvals() == []
    with pytest.raises(ApprovalNotFound, match=r"rejected by manager@company\.com"):
        sagacity.resume_saga("transfer-77", seq, ALICE)
    assert bank.wires == []
    assert "rejected" in result.summary()


def test_privileged_needs_two_distinct_approvers(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    result = sagacity.saga("grant", lambda: banking.grant_agent_access("bot@x", "editor"))
    seq = result.awaiting_seq
    assert seq is not None
    request = only(sagacity.journal.entries("grant"), E.AWAITING_APPROVAL)[0]
    assert request.attributes["signatures_required"] == "2"
    payload = '{"principal":"bot@x","role":"editor"}'
    first = sagacity.approve("grant", seq, "nadia")
    assert not first.approved
    with pytest.raises(AlreadyDecidedError, match=r"^nadia already signed this request$"):
        sagacity.approve("grant", seq, "nadia")
    with pytest.raises(ApprovalMissingError, match="1 of 2"):
        sagacity.resume_saga("grant", seq, payload)
    assert bank.grants == []
    second = sagacity.approve("grant", seq, "omar")
    assert second.approved
    assert second.signed_by == ("nadia", "omar")
    assert sagacity.resume_saga("grant", seq, payload).status is SagaStatus.COMPLETED
    assert bank.grants == [("bot@x", "editor")]


def test_policy_constraint_refuses_whatever_the_approvals(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    message = (
        "[constraint] grant_agent_access: granting the admin role is not delegated to an agent"
    )
    replies: list[str] = []
    result = sagacity.saga(
        "admin", lambda: replies.append(banking.grant_agent_access("bot@x", "admin"))
    )
    assert replies == [message]
    assert bank.grants == []
    assert result.status is SagaStatus.COMPLETED  # refused, not gated: nothing to approve
    violation = only(sagacity.journal.entries("admin"), E.CONSTRAINT_VIOLATED)[0]
    assert violation.error == message
    assert violation.payload == '{"principal":"bot@x","role":"admin"}'
    assert violation.attributes["policy_version"] == "1"
    assert only(sagacity.journal.entries("admin"), E.AWAITING_APPROVAL) == []


def test_constraint_is_checked_again_at_resume(journal: InMemoryJournal, bank: Bank) -> None:
    allow = {"admin": True}

    class Grants:
        @compensable(
            reversibility=Reversibility.PRIVILEGED,
            constraint=lambda args: None if allow["admin"] else "admin is not delegated",
        )
        def grant(self, role: str) -> str:
            bank.grants.append(("x", role))
            return "granted"

    sagacity = Sagacity(journal=journal)
    tools = sagacity.wrap(Grants())
    seq = sagacity.saga("g", lambda: tools.grant("admin")).awaiting_seq or 0
    sagacity.approve("g", seq, "nadia")
    sagacity.approve("g", seq, "omar")
    allow["admin"] = False  # the policy changed between approval and resume
    with pytest.raises(ConstraintViolation, match=r"\[constraint\] grant: admin"):
        sagacity.resume_saga("g", seq, '{"role":"admin"}')
    assert bank.grants == []
    assert only(journal.entries("g"), E.CONSTRAINT_VIOLATED)[0].ref_seq == seq


def test_constraint_that_raises_refuses(sagacity: Sagacity) -> None:
    def broken(args: Any) -> str | None:
        raise KeyError("role")

    calls: list[str] = []

    @compensable(reversibility=Reversibility.READ, constraint=broken)
    def look(role: str) -> str:
        calls.append(role)
        return role

    tool = sagacity.wrap(look)
    result = sagacity.saga("broken-policy", lambda: tool("x"))
    assert str(result.value).startswith("[constraint] look: the policy constraint could not")
    assert calls == []


def test_approval_ttl_expires_the_request_and_compensates(bank: Bank) -> None:
    now = [1_000_000_000_000]
    sagacity = Sagacity(approval_ttl=60, clock=lambda: now[0], policy_version="2026-01")
    banking = sagacity.wrap(bank)
    seq = _gate(sagacity, banking, "ttl")
    request = only(sagacity.journal.entries("ttl"), E.AWAITING_APPROVAL)[0]
    assert request.attributes["expires_at_us"] == str(now[0] + 60_000_000)
    assert request.attributes["policy_version"] == "2026-01"
    now[0] += 61_000_000
    with pytest.raises(ApprovalExpiredError) as info:
        sagacity.approve("ttl", seq, "manager@company.com")
    assert info.value.result is not None
    assert info.value.result.status is SagaStatus.EXPIRED
    expired = only(sagacity.journal.entries("ttl"), E.EXPIRED)[0]
    assert expired.ref_seq == seq
    assert expired.attributes["policy_version"] == "2026-01"
    assert [c.result for c in bank.released] == ["held-SKU-9"]
    assert sagacity.pending_approvals() == []


def test_expire_overdue_sweeps_pending_requests(bank: Bank) -> None:
    now = [1_000_000_000_000]
    sagacity = Sagacity(approval_ttl=10, clock=lambda: now[0])
    banking = sagacity.wrap(bank)
    _gate(sagacity, banking, "a")
    _gate(sagacity, banking, "b")
    assert sagacity.expire_overdue() == []
    now[0] += 11_000_000
    results = sagacity.expire_overdue()
    assert sorted(r.saga_id for r in results) == ["a", "b"]
    assert all(r.status is SagaStatus.EXPIRED for r in results)
    assert sagacity.pending_approvals() == []


def test_approve_and_resume_after_ttl_passes_within_it(bank: Bank) -> None:
    now = [5_000_000]
    sagacity = Sagacity(approval_ttl=60, clock=lambda: now[0])
    banking = sagacity.wrap(bank)
    seq = _gate(sagacity, banking, "in-time")
    now[0] += 30_000_000
    sagacity.approve("in-time", seq, "m")
    now[0] += 31_000_000  # past the TTL between approval and resume
    with pytest.raises(ApprovalExpiredError):
        sagacity.resume_saga("in-time", seq, ALICE)
    assert bank.wires == []


def test_deciding_sagacity_ttl_bounds_requests_made_without_one(bank: Bank) -> None:
    now = [1_000_000_000_000]
    journal = InMemoryJournal()
    agent = Sagacity(journal=journal, clock=lambda: now[0])
    seq = _gate(agent, agent.wrap(bank), "no-ttl")
    request = only(journal.entries("no-ttl"), E.AWAITING_APPROVAL)[0]
    assert "expires_at_us" not in request.attributes
    desk = Sagacity(journal=journal, approval_ttl=30, clock=lambda: now[0], policy_version="p2")
    desk.wrap(bank)
    pending = desk.pending_approvals("no-ttl")[0]
    assert desk.approval_deadline_us(pending) == now[0] + 30_000_000
    assert agent.approval_deadline_us(pending) is None
    with pytest.raises(InvalidArgumentError, match="has not reached its time to live"):
        desk.expire("no-ttl", seq)
    now[0] += 31_000_000
    result = desk.expire("no-ttl", seq)
    assert result.status is SagaStatus.EXPIRED
    expired = only(journal.entries("no-ttl"), E.EXPIRED)[0]
    assert expired.ref_seq == seq
    assert expired.attributes["policy_version"] == "p2"
    with pytest.raises(AlreadyDecidedError, match="expired"):
        desk.expire("no-ttl", seq)
    assert bank.wires == []


def test_request_ttl_shorter_than_the_deciders_still_applies(bank: Bank) -> None:
    now = [1_000_000_000_000]
    journal = InMemoryJournal()
    agent = Sagacity(journal=journal, approval_ttl=5, clock=lambda: now[0])
    seq = _gate(agent, agent.wrap(bank), "short")
    desk = Sagacity(journal=journal, approval_ttl=3600, clock=lambda: now[0])
    now[0] += 6_000_000
    with pytest.raises(ApprovalExpiredError):
        desk.approve("short", seq, "m")


def test_delegated_reject_requests_compensation(journal: InMemoryJournal, bank: Bank) -> None:
    sagacity = Sagacity(journal=journal, compensation="delegated")
    banking = sagacity.wrap(bank)
    seq = _gate(sagacity, banking, "d")
    result = sagacity.reject("d", seq, "m")
    assert result.status is SagaStatus.COMPENSATION_PENDING
    assert bank.released == []
    requested = only(journal.entries("d"), E.COMPENSATION_REQUESTED)[0]
    assert requested.attributes["reason"] == "REJECTED"
    assert requested.ref_seq == seq


def test_resumed_tool_failing_compensates(sagacity: Sagacity, bank: Bank) -> None:
    class Flaky(Bank):
        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def send_wire_transfer(self, amount: str, to: str) -> str:
            raise ConnectionError("bank offline")

    flaky = Flaky()
    banking = sagacity.wrap(flaky)
    seq = _gate(sagacity, banking, "flaky")
    sagacity.approve("flaky", seq, "m")
    result = sagacity.resume_saga("flaky", seq, ALICE)
    assert result.status is SagaStatus.COMPENSATED
    assert result.error == "ConnectionError: bank offline"
    assert [c.result for c in flaky.released] == ["held-SKU-9"]
    assert only(sagacity.journal.entries("flaky"), E.FAILED)[0].error == (
        "ConnectionError: bank offline"
    )


def test_two_gates_in_one_run_complete_after_both(sagacity: Sagacity, banking: Any) -> None:
    def work() -> None:
        banking.send_wire_transfer("1", "a")
        banking.send_wire_transfer("2", "b")

    result = sagacity.saga("two", work)
    first = result.awaiting_seq or 0
    second = sagacity.pending_approvals("two")[1].seq
    sagacity.approve("two", first, "m")
    after_first = sagacity.resume_saga("two", first, '{"amount":"1","to":"a"}')
    assert after_first.status is SagaStatus.AWAITING_APPROVAL
    assert after_first.awaiting_seq == second
    sagacity.approve("two", second, "m")
    assert sagacity.resume_saga("two", second, '{"amount":"2","to":"b"}').status is (
        SagaStatus.COMPLETED
    )


def test_concurrent_resumes_execute_once(sagacity: Sagacity, banking: Any, bank: Bank) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "m")
    outcomes: list[object] = []
    barrier = threading.Barrier(4)

    def resume() -> None:
        barrier.wait()
        try:
            outcomes.append(sagacity.resume_saga("transfer-77", seq, ALICE).status)
        except (AlreadyDecidedError, ApprovalNotFound) as exc:
            outcomes.append(type(exc))

    threads = [threading.Thread(target=resume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(SagaStatus.COMPLETED) == 1
    assert bank.wires == [("100", "alice")]


# -- bad input ---------------------------------------------------------------------------
def test_unknown_saga(sagacity: Sagacity) -> None:
    with pytest.raises(UnknownSagaError):
        sagacity.approve("nope", 1, "m")
    with pytest.raises(UnknownSagaError):
        sagacity.resume_saga("nope", 1, ALICE)
    with pytest.raises(UnknownSagaError):
        sagacity.reject("nope", 1, "m")


def test_unknown_seq(sagacity: Sagacity, banking: Any) -> None:
    seq = _gate(sagacity, banking)
    before = list(sagacity.journal.entries("transfer-77"))
    for bad in (seq - 1, 999):
        with pytest.raises(ApprovalNotFound):
            sagacity.approve("transfer-77", bad, "m")
        with pytest.raises(ApprovalNotFound):
            sagacity.resume_saga("transfer-77", bad, ALICE)
    for wrong_type in (0, -1, "3", True, None):
        with pytest.raises(InvalidArgumentError):
            sagacity.approve("transfer-77", wrong_type, "m")  # type: ignore[arg-type]
    assert list(sagacity.journal.entries("transfer-77")) == before


@pytest.mark.parametrize("payload", [None, 42, b'{"amount":"100","to":"alice"}', {"a": 1}])
def test_resume_with_a_non_string_payload(
    sagacity: Sagacity, banking: Any, bank: Bank, payload: object
) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "m")
    before = list(sagacity.journal.entries("transfer-77"))
    with pytest.raises(InvalidArgumentError, match="payload must be"):
        sagacity.resume_saga("transfer-77", seq, payload)  # type: ignore[arg-type]
    assert list(sagacity.journal.entries("transfer-77")) == before
    assert bank.wires == []


def test_approve_twice(sagacity: Sagacity, banking: Any) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "m")
    with pytest.raises(AlreadyDecidedError, match=r"^m already signed this request$"):
        sagacity.approve("transfer-77", seq, "m")
    with pytest.raises(AlreadyDecidedError, match="already has the 1 signature"):
        sagacity.approve("transfer-77", seq, "someone-else")
    assert len(only(sagacity.journal.entries("transfer-77"), E.APPROVED)) == 1


def test_approve_after_reject(sagacity: Sagacity, banking: Any) -> None:
    seq = _gate(sagacity, banking)
    sagacity.reject("transfer-77", seq, "m")
    before = list(sagacity.journal.entries("transfer-77"))
    with pytest.raises(AlreadyDecidedError, match="rejected"):
        sagacity.approve("transfer-77", seq, "other")
    with pytest.raises(AlreadyDecidedError, match="rejected"):
        sagacity.reject("transfer-77", seq, "other")
    assert list(sagacity.journal.entries("transfer-77")) == before


def test_reject_after_resume(sagacity: Sagacity, banking: Any, bank: Bank) -> None:
    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "m")
    sagacity.resume_saga("transfer-77", seq, ALICE)
    before = list(sagacity.journal.entries("transfer-77"))
    with pytest.raises(AlreadyDecidedError, match="already resumed"):
        sagacity.reject("transfer-77", seq, "m")
    with pytest.raises(ApprovalNotFound, match="already resumed"):
        sagacity.resume_saga("transfer-77", seq, ALICE)
    assert list(sagacity.journal.entries("transfer-77")) == before
    assert bank.wires == [("100", "alice")]
    assert bank.released == []


@pytest.mark.parametrize("approver", ["", "   ", None, 7])
def test_empty_approver(sagacity: Sagacity, banking: Any, approver: object) -> None:
    seq = _gate(sagacity, banking)
    before = list(sagacity.journal.entries("transfer-77"))
    with pytest.raises(InvalidArgumentError, match="approver"):
        sagacity.approve("transfer-77", seq, approver)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="approver"):
        sagacity.reject("transfer-77", seq, approver)  # type: ignore[arg-type]
    assert list(sagacity.journal.entries("transfer-77")) == before


def test_decisions_on_a_tampered_chain_are_refused(
    journal: InMemoryJournal, sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    import dataclasses

    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "m")
    chain = journal._chains["transfer-77"]
    index = next(i for i, e in enumerate(chain) if e.event_type is E.AWAITING_APPROVAL)
    chain[index] = dataclasses.replace(chain[index], payload=MALLORY)  # an edit in the store
    with pytest.raises(ChainIntegrityError, match="does not verify"):
        sagacity.resume_saga("transfer-77", seq, MALLORY)
    assert bank.wires == []


def test_resume_of_an_unwrapped_tool_keeps_the_request(journal: InMemoryJournal) -> None:
    from sagacity.errors import DeclarationError

    producer = Sagacity(journal=journal)
    banking = producer.wrap(Bank())
    seq = _gate(producer, banking, "elsewhere")
    approvals_service = Sagacity(journal=journal)
    approvals_service.approve("elsewhere", seq, "m")
    with pytest.raises(DeclarationError, match="not registered"):
        approvals_service.resume_saga("elsewhere", seq, ALICE)
    assert len(approvals_service.pending_approvals("elsewhere")) == 1
    bank = Bank()
    approvals_service.wrap(bank)
    assert approvals_service.resume_saga("elsewhere", seq, ALICE).status is SagaStatus.COMPLETED
    assert bank.wires == [("100", "alice")]


class RacingJournal(InMemoryJournal):
    """Lets another process decide between this process's read and its append."""

    def __init__(self) -> None:
        super().__init__()
        self.interlude: Any = None

    def append_after(self, draft: Any, *, after_seq: int, durable: bool = True) -> Any:
        interlude, self.interlude = self.interlude, None
        if interlude is not None and draft.event_type in (E.APPROVED, E.INTENT, E.REJECTED):
            interlude()
        return super().append_after(draft, after_seq=after_seq, durable=durable)


def test_two_processes_approving_at_once_record_one_decision() -> None:
    journal = RacingJournal()
    agent = Sagacity(journal=journal)
    seq = _gate(agent, agent.wrap(Bank()), "race")
    replica_a, replica_b = Sagacity(journal=journal), Sagacity(journal=journal)
    journal.interlude = lambda: replica_b.approve("race", seq, "bob")
    with pytest.raises(AlreadyDecidedError, match="already has the 1 signature"):
        replica_a.approve("race", seq, "alice")
    approvals = only(journal.entries("race"), E.APPROVED)
    assert [a.actor for a in approvals] == ["bob"]


def test_two_processes_resuming_at_once_execute_once() -> None:
    journal = RacingJournal()
    agent = Sagacity(journal=journal)
    seq = _gate(agent, agent.wrap(Bank()), "race-resume")
    agent.approve("race-resume", seq, "m")
    bank_a, bank_b = Bank(), Bank()
    replica_a, replica_b = Sagacity(journal=journal), Sagacity(journal=journal)
    replica_a.wrap(bank_a)
    replica_b.wrap(bank_b)
    journal.interlude = lambda: replica_b.resume_saga("race-resume", seq, ALICE)
    with pytest.raises(ApprovalNotFound, match="already resumed"):
        replica_a.resume_saga("race-resume", seq, ALICE)
    assert bank_a.wires == []
    assert bank_b.wires == [("100", "alice")]
    assert len(only(journal.entries("race-resume"), E.EXECUTED)) == 2  # reserve + the wire


def test_reject_racing_a_resume_loses_cleanly() -> None:
    journal = RacingJournal()
    agent = Sagacity(journal=journal)
    seq = _gate(agent, agent.wrap(Bank()), "race-reject")
    agent.approve("race-reject", seq, "m")
    resumer, rejecter = Sagacity(journal=journal), Sagacity(journal=journal)
    resumer.wrap(Bank())
    rejecter.wrap(Bank())
    journal.interlude = lambda: resumer.resume_saga("race-reject", seq, ALICE)
    with pytest.raises(AlreadyDecidedError, match="already resumed"):
        rejecter.reject("race-reject", seq, "omar")
    assert only(journal.entries("race-reject"), E.REJECTED) == []


def _interrupt_resume(sagacity: Sagacity, seq: int, *, executed: bool) -> None:
    """What a resume journals before its process dies: the call's INTENT (and EXECUTED)."""
    from sagacity.tools._tool import executed_draft, intent_draft

    tool = sagacity.registry.get("send_wire_transfer")
    assert tool is not None
    draft = intent_draft(sagacity, tool.definition, "transfer-77", ALICE, seq)
    intent = sagacity.journal.append(draft)
    if executed:
        sagacity.journal.append(executed_draft(sagacity, tool.definition, intent, "transfer-ok"))


@pytest.mark.parametrize("run", ["sync", "async"])
def test_interrupted_resume_is_finished_without_calling_again(
    sagacity: Sagacity, banking: Any, bank: Bank, run: str
) -> None:
    import asyncio

    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "manager@company.com")
    _interrupt_resume(sagacity, seq, executed=True)
    if run == "sync":
        result = sagacity.resume_saga("transfer-77", seq, ALICE)
    else:
        result = asyncio.run(sagacity.resume_saga_async("transfer-77", seq, ALICE))
    assert (result.status, result.value) == (SagaStatus.COMPLETED, "transfer-ok")
    assert bank.wires == []
    assert kinds(sagacity.journal.entries("transfer-77"))[-3:] == [
        (E.INTENT, "send_wire_transfer"),
        (E.EXECUTED, "send_wire_transfer"),
        (E.SAGA_ENDED, None),
    ]


def test_interrupted_resume_without_outcome_is_suspect_and_compensated_inline(
    sagacity: Sagacity, banking: Any, bank: Bank
) -> None:
    from sagacity.errors import StepInDoubtError

    seq = _gate(sagacity, banking)
    sagacity.approve("transfer-77", seq, "manager@company.com")
    _interrupt_resume(sagacity, seq, executed=False)
    with pytest.raises(StepInDoubtError, match="in doubt") as caught:
        sagacity.resume_saga("transfer-77", seq, ALICE)
    assert bank.wires == []
    result = caught.value.result
    assert result is not None
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.tool for s in result.suspects] == ["send_wire_transfer"]
    assert [c.tool for c in bank.released] == ["reserve_inventory"]
    entries = sagacity.journal.entries("transfer-77")
    assert [e.event_type for e in entries].count(E.SUSPECT) == 1
    assert entries[-1].event_type is E.SAGA_ENDED
