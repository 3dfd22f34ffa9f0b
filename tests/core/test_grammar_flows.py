"""The saga grammar never reports a flow the product journals (docs/adr/0017, "The saga
grammar"): each flow is run by the real core on the in-memory journal, and its chain — and
every prefix of it, a saga in progress — reads without a finding.  A false finding on a
legitimate saga is worse than a missed impossible one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
)
from sagacity.chain._grammar import GrammarRule, check
from sagacity.errors import ApprovalError, ConstraintViolation

WIRE = '{"amount":"100","to":"alice"}'
GRANT = '{"principal":"bot","role":"reader"}'


class Shop:
    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return f"held-{sku}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        return None

    @compensable(by="release")
    def order(self, sku: str) -> str:
        raise RuntimeError("order service down")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        return "transfer-ok"

    @compensable(
        reversibility=Reversibility.PRIVILEGED,
        constraint=lambda args: "no admin" if args.get("role") == "admin" else None,
    )
    def grant(self, principal: str, role: str) -> str:
        return f"granted {role}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def fragile(self, amount: str) -> str:
        raise RuntimeError("bank down")


def _gate(s: Sagacity, shop: Any, saga: str) -> int:
    result = s.saga(saga, lambda: (shop.reserve("A"), shop.send_wire_transfer("100", "alice")))
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    return result.awaiting_seq


def plain(s: Sagacity, shop: Any) -> None:
    assert s.saga("f", lambda: (shop.reserve("A"), shop.reserve("B"))).status is (
        SagaStatus.COMPLETED
    )


DONE = (SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_PENDING)
"""An undone saga's end: inline, or handed to the compensation service (delegated)."""


def failed(s: Sagacity, shop: Any) -> None:
    assert s.saga("f", lambda: (shop.reserve("A"), shop.order("A"))).status in DONE


def raised(s: Sagacity, shop: Any) -> None:
    def work() -> None:
        shop.reserve("A")
        raise ValueError("the agent's own code failed")

    assert s.saga("f", work).status in DONE


def approved(s: Sagacity, shop: Any) -> None:
    seq = _gate(s, shop, "f")
    s.approve("f", seq, "manager@example.com")
    assert s.resume_saga("f", seq, WIRE).status is SagaStatus.COMPLETED


def privileged(s: Sagacity, shop: Any) -> None:
    seq = s.saga("f", lambda: shop.grant("bot", "reader")).awaiting_seq
    assert seq is not None
    s.approve("f", seq, "alice@example.com")
    s.approve("f", seq, "bob@example.com")
    assert s.resume_saga("f", seq, GRANT).status is SagaStatus.COMPLETED


def rejected(s: Sagacity, shop: Any) -> None:
    seq = _gate(s, shop, "f")
    assert s.reject("f", seq, "cfo@example.com", reason="no").status in (
        SagaStatus.REJECTED,
        SagaStatus.COMPENSATION_PENDING,
    )


def refused(s: Sagacity, shop: Any) -> None:
    seq = _gate(s, shop, "f")
    s.approve("f", seq, "manager@example.com")
    with pytest.raises(ApprovalError):
        s.resume_saga("f", seq, '{"amount":"900","to":"eve"}')


def constrained(s: Sagacity, shop: Any) -> None:
    result = s.saga("f", lambda: (shop.reserve("A"), shop.grant("bot", "admin")))
    assert result.status is SagaStatus.COMPLETED  # the refusal is returned to the agent


def resumed_call_failed(s: Sagacity, shop: Any) -> None:
    seq = s.saga("f", lambda: (shop.reserve("A"), shop.fragile("5"))).awaiting_seq
    assert seq is not None
    s.approve("f", seq, "manager@example.com")
    assert s.resume_saga("f", seq, '{"amount":"5"}').status in DONE


def two_requests(s: Sagacity, shop: Any) -> None:
    def work() -> None:
        shop.send_wire_transfer("100", "alice")
        shop.grant("bot", "reader")

    result = s.saga("f", work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    wire, grant = (r.seq for r in s.pending_approvals("f"))
    s.approve("f", wire, "manager@example.com")
    assert s.resume_saga("f", wire, WIRE).status is SagaStatus.AWAITING_APPROVAL
    s.approve("f", grant, "alice@example.com")
    s.approve("f", grant, "bob@example.com")
    assert s.resume_saga("f", grant, GRANT).status is SagaStatus.COMPLETED


def conversation(s: Sagacity, shop: Any) -> None:
    talk = s.conversation("f")
    talk.call(lambda: shop.reserve("A"))
    with contextlib.suppress(RuntimeError):
        talk.call(lambda: (shop.reserve("B"), shop.order("B")))
    assert talk.end().status in DONE


def expired(s: Sagacity, shop: Any) -> None:
    now = [1_000.0]
    desk = Sagacity(
        journal=s.journal,
        approval_ttl=60,
        clock=lambda: int(now[0] * 1_000_000),
        compensation=s.compensation_mode,
    )
    desk.wrap(Shop())
    seq = _gate(s, shop, "f")
    now[0] = 10**10  # long after the request
    assert desk.expire("f", seq).status in (SagaStatus.EXPIRED, SagaStatus.COMPENSATION_PENDING)


def async_saga(s: Sagacity, shop: Any) -> None:
    async def work() -> None:
        shop.reserve("A")
        shop.order("A")

    assert asyncio.run(s.saga_async("f", work)).status in DONE


def handed_over_then_compensated(s: Sagacity, shop: Any) -> None:
    """Delegated: the failure is handed over; the service's run compensates and ends it."""
    failed(s, shop)
    if s.compensation_mode == "delegated":
        service = Sagacity(journal=s.journal, compensation="delegated")
        service.wrap(Shop())
        assert service.compensate("f").status is SagaStatus.COMPENSATED


FLOWS: dict[str, Callable[[Sagacity, Any], None]] = {
    f.__name__: f
    for f in (
        plain,
        failed,
        raised,
        approved,
        privileged,
        rejected,
        refused,
        constrained,
        resumed_call_failed,
        two_requests,
        conversation,
        expired,
        async_saga,
        handed_over_then_compensated,
    )
}


@pytest.mark.parametrize("mode", ["inline", "delegated"])
@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_no_flow_of_the_product_is_reported(flow: str, mode: str) -> None:
    journal = InMemoryJournal()
    s = Sagacity(journal=journal, compensation=mode)
    shop = s.wrap(Shop())
    with contextlib.suppress(ConstraintViolation, RuntimeError):  # what the flow raises
        FLOWS[flow](s, shop)
    chain = journal.entries("f")
    assert chain
    for end in range(1, len(chain) + 1):
        assert check(chain[:end]) == [], [(e.seq, e.event_type) for e in chain[:end]]


def test_the_issues_forgery_is_reported_on_a_chain_the_core_wrote() -> None:
    """The saga the core journaled up to its pending PRIVILEGED request, and a writer's
    correctly linked EXECUTED after it: the chain verifies, the grammar names the event."""
    from sagacity import EntryDraft, EventType, verify

    journal = InMemoryJournal()
    s = Sagacity(journal=journal)
    shop = s.wrap(Shop())
    assert s.saga("f", lambda: shop.grant("bot", "reader")).status is (SagaStatus.AWAITING_APPROVAL)
    forged = journal.append(
        EntryDraft(
            saga_id="f",
            event_type=EventType.EXECUTED,
            tool="grant",
            result="granted reader",
            attributes={"reversibility": "PRIVILEGED", "writer": "agent-9"},
        )
    )
    chain = journal.entries("f")
    assert verify(chain).ok
    (finding,) = check(chain)
    assert (finding.rule, finding.seq, finding.writer) == (
        GrammarRule.EXECUTED_WITHOUT_INTENT,
        forged.seq,
        "agent-9",
    )
    assert "agent-9" in finding.describe()
