"""Tools the MCP tests serve with ``--tools tests.mcp_server.tools:Desk``.

The approvals tests' bank (a hold, an irreversible wire, a privileged grant) plus a read and a
compensatable charge that fails above a limit; every call is appended to the file named by
``SAGACITY_TEST_CALL_LOG``.
"""

from __future__ import annotations

from sagacity import CompensationContext, Reversibility, compensable, compensation
from tests.approvals.tools import Bank, _record


class Desk(Bank):
    """Bank's tools, a stock lookup and a card charge."""

    @compensable(reversibility=Reversibility.READ)
    def lookup_stock(self, sku: str) -> str:
        """How many of ``sku`` are in stock."""
        _record("lookup_stock", sku=sku)
        return f"{sku}: 5 in stock"

    @compensable(by="refund_card")
    def charge_card(self, amount: int, card: str = "visa") -> dict[str, object]:
        """Charge ``amount`` to a card; more than 1000 is declined."""
        _record("charge_card", amount=str(amount), card=card)
        if amount > 1000:
            raise RuntimeError(f"card declined for {amount}")
        return {"charged": amount, "card": card}

    @compensation
    def refund_card(self, context: CompensationContext) -> None:
        _record("refund_card", amount=str(context.arguments["amount"]))
