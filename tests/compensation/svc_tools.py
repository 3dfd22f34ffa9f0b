"""Tools the compensation service's tests compensate with.

Every undo writes what it did to a real Postgres database (``SVC_TOOLS_DSN``): one row per
call in ``undo_calls`` and one per effect in ``undo_effects``.  Tests count side effects from
these tables, never from the service's logs.  An idempotent undo applies its effect once per
idempotency key (as an external API honouring the key would); the others apply it on every
call.  ``SVC_TOOLS_SLOW_S`` makes each undo sleep after its effect (a window to kill in).
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

from sagacity import (
    CompensationContext,
    Reversibility,
    UndoCall,
    compensable,
    compensation,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS undo_calls (
    id bigserial PRIMARY KEY, saga_id text, seq int, tool text, key text,
    pid int, started_at double precision
);
CREATE TABLE IF NOT EXISTS undo_effects (
    id bigserial PRIMARY KEY, saga_id text, seq int, tool text, key text
);
"""


def create_schema(dsn: str) -> None:
    """Create the side-effect tables in ``dsn``'s schema."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)


class Unrepresentable:
    """A value whose ``repr`` raises: garbage for the journal."""

    def __repr__(self) -> str:
        raise RuntimeError("cannot describe myself")


class Shop:
    """Orders, payments and a few misbehaving tools."""

    def __init__(self, dsn: str | None = None) -> None:
        self.dsn = dsn

    def _undo(self, ctx: CompensationContext, *, idempotent: bool) -> dict[str, Any]:
        started = time.time()
        assert self.dsn, "SVC_TOOLS_DSN is not set"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO undo_calls (saga_id, seq, tool, key, pid, started_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (ctx.saga_id, ctx.seq, ctx.tool, ctx.idempotency_key, os.getpid(), started),
            )
            with conn.transaction():
                if idempotent:
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))", (ctx.idempotency_key,)
                    )
                    seen = conn.execute(
                        "SELECT 1 FROM undo_effects WHERE key = %s", (ctx.idempotency_key,)
                    ).fetchone()
                    if seen is None:
                        conn.execute(
                            "INSERT INTO undo_effects (saga_id, seq, tool, key) "
                            "VALUES (%s, %s, %s, %s)",
                            (ctx.saga_id, ctx.seq, ctx.tool, ctx.idempotency_key),
                        )
                else:
                    conn.execute(
                        "INSERT INTO undo_effects (saga_id, seq, tool, key) "
                        "VALUES (%s, %s, %s, %s)",
                        (ctx.saga_id, ctx.seq, ctx.tool, ctx.idempotency_key),
                    )
        slow = float(os.environ.get("SVC_TOOLS_SLOW_S", "0") or 0)
        if slow:
            time.sleep(slow)
        return {"undone": ctx.tool, "key": ctx.idempotency_key}

    @compensable(by="refund")
    def charge(self, order: str, amount: int) -> dict[str, Any]:
        return {"order": order, "charged": amount}

    @compensation(idempotent=True)
    def refund(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._undo(ctx, idempotent=True)

    @compensable(by="release")
    def reserve(self, order: str, item: str) -> dict[str, Any]:
        return {"order": order, "reserved": item}

    @compensation
    def release(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._undo(ctx, idempotent=False)

    @compensable(by="unship", reversibility=Reversibility.REVERSIBLE)
    def ship(self, order: str) -> str:
        return f"shipment-{order}"

    @compensation(idempotent=True)
    def unship(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._undo(ctx, idempotent=True)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, order: str, amount: int) -> str:
        return f"wired {amount}"

    @compensable(reversibility=Reversibility.READ)
    def lookup(self, order: str) -> dict[str, Any]:
        return {"order": order, "status": "open"}

    @compensable(by="explode")
    def fragile(self, order: str) -> str:
        return "ok"

    @compensation
    def explode(self, ctx: CompensationContext) -> None:
        raise RuntimeError("the refund gateway said no")

    @compensable(by="stall")
    def sticky(self, order: str) -> str:
        return "ok"

    @compensation
    def stall(self, ctx: CompensationContext) -> None:
        time.sleep(3600)

    @compensable(by="babble")
    def odd(self, order: str) -> str:
        return "ok"

    # -- undo tools: called with the undo's arguments, not with a context ------------------
    def _effect(self, tool: str, key: str) -> str:
        """Record a call of ``tool`` (an undo tool, or a gated tool that must never run as
        one) in both tables, with ``key`` naming what it acted on."""
        assert self.dsn, "SVC_TOOLS_DSN is not set"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for table in ("undo_calls", "undo_effects"):
                conn.execute(
                    f"INSERT INTO {table} (saga_id, seq, tool, key) VALUES ('', 0, %s, %s)",
                    (tool, key),
                )
        return f"{tool} {key}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, to: str, amount: int) -> str:
        return self._effect("send_wire", f"{to}:{amount}")

    @compensable(reversibility=Reversibility.PRIVILEGED)
    def grant_admin(self, user: str) -> str:
        return self._effect("grant_admin", user)

    @compensable
    def release_stock(self, hold_id: str) -> str:
        return self._effect("release_stock", hold_id)

    @compensable(undo_tools=("release_stock",))
    def hold_stock(self, sku: str) -> dict[str, Any]:
        hold = f"hold-{sku}"
        return {"hold_id": hold, "undo": {"tool": "release_stock", "arguments": {"hold_id": hold}}}

    @compensable(undo=UndoCall(tool="release_stock", arguments={"hold_id": "$result.hold_id"}))
    def book(self, sku: str) -> dict[str, Any]:
        return {"hold_id": f"booking-{sku}"}

    @compensation
    def babble(self, ctx: CompensationContext) -> Unrepresentable:
        self._undo(ctx, idempotent=False)
        return Unrepresentable()


shop = Shop(os.environ.get("SVC_TOOLS_DSN"))
"""The instance ``--tools tests.compensation.svc_tools:shop`` names."""


class CardShop(Shop):
    """:class:`Shop` with a card gateway that echoes the card number it was given, in its
    answer and in its refusal; the number is a redacted field (wrap it on a sealed journal)."""

    @compensable(reversibility=Reversibility.READ, redact=["card_number"])
    def check_card(self, card_number: str) -> dict[str, Any]:
        return {"card": card_number, "status": f"card {card_number} accepted"}

    @compensable(by="refund", redact=["card_number"])
    def pay_by_card(self, order: str, card_number: str, amount: int) -> dict[str, Any]:
        raise ValueError(f"card {card_number} declined for order {order} ({amount})")


card_shop = CardShop(os.environ.get("SVC_TOOLS_DSN"))
"""The instance ``--tools tests.compensation.svc_tools:card_shop`` names: its tools redact, so
the service loads it only with a key-encryption key."""


class Partial:
    """The same tool names as :class:`Shop` for a subset: a service that knows only these."""

    def __init__(self, dsn: str | None = None) -> None:
        self._shop = Shop(dsn)

    @compensable(by="refund", name="charge")
    def charge(self, order: str, amount: int) -> dict[str, Any]:
        return {"order": order, "charged": amount}

    @compensation(idempotent=True)
    def refund(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._shop._undo(ctx, idempotent=True)


partial = Partial(os.environ.get("SVC_TOOLS_DSN"))
"""Knows only ``charge``: a saga that also reserved has a tool this service does not know."""


class NeedsSettings:
    """A tools class the loader cannot instantiate by itself (it needs an argument)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
