"""Tools the approvals tests register with ``--tools tests.approvals.tools:Bank``.

Every call is appended to the file named by ``SAGACITY_TEST_CALL_LOG`` (when set), so a test in
another process can assert what ran — and that a refused resume never called the tool.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sagacity import CompensationContext, Reversibility, compensable, compensation


def _record(name: str, **arguments: str) -> None:
    log = os.environ.get("SAGACITY_TEST_CALL_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as file:
            file.write(json.dumps({"tool": name, **arguments}) + "\n")


def calls(log: Path) -> list[dict[str, str]]:
    """The calls recorded in ``log``."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


class Bank:
    """An inventory hold (compensatable), a wire (irreversible) and an access grant (privileged)."""

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str) -> str:
        _record("reserve_inventory", sku=sku)
        return f"held-{sku}"

    @compensation
    def release_inventory(self, context: CompensationContext) -> None:
        # The hold released, as the service read it from the chain (opened when sealed).
        _record(
            "release_inventory",
            sku=str(context.arguments.get("sku")),
            held=context.result_text or "",
        )

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        _record("send_wire_transfer", amount=amount, to=to)
        if to == "bounce":
            raise ConnectionError("the bank refused the transfer")
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
        _record("grant_agent_access", principal=principal, role=role)
        return f"granted {role}"


class StrictBank(Bank):
    """The same tools under a newer policy: wires above 10000 are refused whatever the approval."""

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE,
        constraint=lambda args: (
            "wires above 10000 need a treasury mandate"
            if int(args.get("amount", "0")) > 10000
            else None
        ),
    )
    def send_wire_transfer(self, amount: str, to: str) -> str:
        _record("send_wire_transfer", amount=amount, to=to)
        return "transfer-ok"


BANK = Bank()
"""An instance, for services that want the object owning the tools (compensation)."""


class Cards:
    """A card charge whose card number is never journaled (docs/adr/0019-erasure.md §5): only a
    process with the key-encryption key may serve it."""

    @compensable(reversibility=Reversibility.IRREVERSIBLE, redact=["card_number"])
    def charge_card(self, card_number: str, amount: str) -> str:
        _record("charge_card", card_number=card_number, amount=amount)
        return "charged"
