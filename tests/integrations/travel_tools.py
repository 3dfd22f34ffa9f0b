"""Tools the integration tests run: a reversible booking, its cancellation, a gated payment.

Nothing here touches the outside world: a booking is a reference made from its arguments, its
undo returns what it cancelled, and the payment fails when its amount says so (to make a
resumed call fail and the saga compensate).
"""

from __future__ import annotations

from sagacity import CompensationContext, Reversibility, compensable, compensation


class Travel:
    """A booking (compensated by :meth:`cancel`) and a payment that needs approval."""

    @compensable(reversibility=Reversibility.COMPENSATABLE, by="cancel")
    def book(self, city: str, guest: str) -> str:
        """Book a room (``guest`` is personal data: no span may carry it)."""
        return f"booking-{city}"

    @compensation(idempotent=True)
    def cancel(self, ctx: CompensationContext) -> str:
        """Cancel the booking of ``ctx``'s step."""
        return f"cancelled {ctx.result}"

    @compensable(reversibility=Reversibility.READ)
    def lose(self, guest: str) -> str:
        """A lookup that always fails (its error message names its argument)."""
        raise RuntimeError(f"no such guest: {guest}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: int) -> str:
        """Pay ``amount``; an amount over 1000 is declined (the call fails)."""
        if amount > 1000:
            raise RuntimeError("payment declined")
        return f"paid {amount}"


travel = Travel()
