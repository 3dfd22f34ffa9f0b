"""The reader's own tools the pages name (``--tools myapp.tools:Bank``), for the docs' run:
each page runs in a directory holding this package, as a reader's working directory would
hold theirs. A page that shows its tools writes its own ``myapp/tools.py`` over it."""

from __future__ import annotations

from sagacity import CompensationContext, Reversibility, compensable, compensation


class Bank:
    """A hold that can be released, and a wire that cannot be recalled."""

    @compensable(by="release_hold")
    def place_hold(self, amount: str) -> str:
        """Hold an amount on the account."""
        return f"hold-{amount}"

    @compensation
    def release_hold(self, context: CompensationContext) -> None:
        pass

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money out (cannot be recalled)."""
        return f"sent {amount} to {to}"


class Payments:
    @compensable(by="refund")
    def charge(self, order: str, amount: str) -> str:
        return f"charge-{order}"

    @compensation
    def refund(self, context: CompensationContext) -> None:
        pass


class Inventory:
    @compensable(by="release")
    def reserve(self, sku: str, quantity: int) -> str:
        return f"reserved {quantity} x {sku}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        pass


payments = Payments()
inventory = Inventory()
