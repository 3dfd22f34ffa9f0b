"""Fixtures for the saga core: a journal, a Sagacity on it, and a set of recording tools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
)


@dataclass
class Ledger:
    """What the fake world saw: every effect and every undo, in order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    contexts: list[CompensationContext] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


class OrderTools:
    """The example of the public API: inventory, payment, an irreversible confirmation."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.fail_charge = False
        self.fail_release = False

    @compensable(by="release_inventory")
    def reserve_inventory(self, product_id: str, quantity: int) -> str:
        self.ledger.calls.append(("reserve_inventory", (product_id, quantity)))
        return f"res-{product_id}-{quantity}"

    @compensation
    def release_inventory(self, context: CompensationContext) -> None:
        self.ledger.contexts.append(context)
        self.ledger.calls.append(("release_inventory", context.result))
        if self.fail_release:
            raise RuntimeError("inventory service down")

    @compensable(by="refund")
    def charge_card(self, amount: int, currency: str = "EUR") -> dict[str, Any]:
        if self.fail_charge:
            raise RuntimeError("card declined")
        self.ledger.calls.append(("charge_card", amount))
        return {"charge_id": f"ch_{amount}", "amount": amount}

    @compensation(idempotent=True)
    def refund(self, context: CompensationContext) -> str:
        self.ledger.contexts.append(context)
        self.ledger.calls.append(("refund", context.result["charge_id"]))
        return f"re_{context.result['charge_id']}"

    @compensable(reversibility=Reversibility.READ)
    def lookup_stock(self, product_id: str) -> int:
        self.ledger.calls.append(("lookup_stock", product_id))
        return 7

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_confirmation(self, order_id: str) -> str:
        self.ledger.calls.append(("send_confirmation", order_id))
        return f"sent-{order_id}"

    def helper(self) -> str:
        """Not a tool: reached through the wrapper unchanged."""
        return "plain"


@pytest.fixture
def journal() -> InMemoryJournal:
    return InMemoryJournal()


@pytest.fixture
def sagacity(journal: InMemoryJournal) -> Sagacity:
    return Sagacity(journal=journal, writer_id="test-writer")


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def order_tools(ledger: Ledger) -> OrderTools:
    return OrderTools(ledger)


@pytest.fixture
def tools(sagacity: Sagacity, order_tools: OrderTools) -> Any:
    return sagacity.wrap(order_tools)


def kinds(entries: Any) -> list[tuple[EventType, str | None]]:
    """(event type, tool) of each entry, for compact assertions."""
    return [(e.event_type, e.tool) for e in entries]


def only(entries: Any, event: EventType) -> list[JournalEntry]:
    return [e for e in entries if e.event_type is event]


def run(sagacity: Sagacity, saga_id: str, work: Callable[[], Any]) -> Any:
    return sagacity.saga(saga_id, work)
