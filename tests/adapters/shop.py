"""The tools every adapter test hands to its framework: an inventory, orders, a confirmation.

Plain functions declared with ``@compensable``, as an application would write them, with their
effects recorded in :data:`SHOP` so a test can check what the world saw.  Sync and async on
purpose: ``reserve_inventory`` and ``send_confirmation`` are sync, ``create_order`` and
``check_stock`` async.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sagacity import (
    CompensationContext,
    EventType,
    JournalEntry,
    Reversibility,
    compensable,
    compensation,
)


@dataclass
class Shop:
    """What the fake world saw."""

    stock: dict[str, int] = field(default_factory=lambda: {"widget": 10})
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent: list[tuple[str, str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    create_order_error: BaseException | None = None

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


SHOP = Shop()


@compensable(reversibility=Reversibility.READ)
async def check_stock(sku: str) -> int:
    """How many units of ``sku`` are in stock."""
    SHOP.calls.append("check_stock")
    return SHOP.stock.get(sku, 0)


@compensable(by="release_inventory")
def reserve_inventory(sku: str, quantity: int) -> dict[str, Any]:
    """Reserve ``quantity`` units of ``sku``."""
    SHOP.calls.append("reserve_inventory")
    SHOP.stock[sku] -= quantity
    return {"sku": sku, "quantity": quantity}


@compensation
def release_inventory(context: CompensationContext) -> None:
    SHOP.calls.append("release_inventory")
    SHOP.stock[context.arguments["sku"]] += context.arguments["quantity"]


@compensable(by="cancel_order")
async def create_order(sku: str, quantity: int) -> str:
    """Create an order for a reservation."""
    SHOP.calls.append("create_order")
    if SHOP.create_order_error is not None:
        raise SHOP.create_order_error
    order_id = f"order-{len(SHOP.orders) + 1}"
    SHOP.orders[order_id] = {"sku": sku, "quantity": quantity}
    return order_id


@compensation
async def cancel_order(context: CompensationContext) -> None:
    SHOP.calls.append("cancel_order")
    SHOP.orders.pop(str(context.result), None)


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def send_confirmation(order_id: str, email: str) -> str:
    """Email the customer their confirmation (cannot be unsent)."""
    SHOP.calls.append("send_confirmation")
    SHOP.sent.append((order_id, email))
    return f"sent to {email}"


def kinds(entries: list[JournalEntry] | Any) -> list[tuple[str, str | None]]:
    """Each entry's event type and tool, in seq order."""
    return [(e.event_type.value, e.tool) for e in entries]


E = EventType
