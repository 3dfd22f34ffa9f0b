"""Tools of the fault-injection run, with their side effects in PostgreSQL.

Every undo records each call (``fault_undo_calls``) and applies its effect once per
idempotency key (``fault_undo_effects``), as an outside API honouring the key would; the
checker counts effects per step from that table, never from the services' logs. ``wire`` is
``IRREVERSIBLE`` (so the saga waits for approval) and records each execution in
``fault_wires``. The database comes from ``FAULT_TOOLS_DSN``.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from sagacity import CompensationContext, Reversibility, compensable, compensation

SCHEMA = """
CREATE TABLE IF NOT EXISTS fault_undo_calls (
    id bigserial PRIMARY KEY, saga_id text, seq int, tool text, key text, pid int
);
CREATE TABLE IF NOT EXISTS fault_undo_effects (
    id bigserial PRIMARY KEY, saga_id text, seq int, tool text, key text
);
CREATE TABLE IF NOT EXISTS fault_wires (
    id bigserial PRIMARY KEY, saga_id text, amount int, pid int
);
"""


def create_schema(dsn: str) -> None:
    """Create the side-effect tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)


class Shop:
    """Two compensable steps with idempotent undos, and a wire that needs approval."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn

    def _connect(self) -> psycopg.Connection[Any]:
        assert self.dsn, "FAULT_TOOLS_DSN is not set"
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)

    def _undo(self, ctx: CompensationContext) -> dict[str, Any]:
        key = ctx.idempotency_key
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO fault_undo_calls (saga_id, seq, tool, key, pid) "
                "VALUES (%s, %s, %s, %s, %s)",
                (ctx.saga_id, ctx.seq, ctx.tool, key, os.getpid()),
            )
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
                seen = conn.execute(
                    "SELECT 1 FROM fault_undo_effects WHERE key = %s", (key,)
                ).fetchone()
                if seen is None:
                    conn.execute(
                        "INSERT INTO fault_undo_effects (saga_id, seq, tool, key) "
                        "VALUES (%s, %s, %s, %s)",
                        (ctx.saga_id, ctx.seq, ctx.tool, key),
                    )
        return {"undone": ctx.tool, "key": key}

    @compensable(by="refund")
    def charge(self, order: str, amount: int) -> dict[str, Any]:
        return {"order": order, "charged": amount}

    @compensation(idempotent=True)
    def refund(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._undo(ctx)

    @compensable(by="release")
    def reserve(self, order: str, item: str) -> dict[str, Any]:
        return {"order": order, "reserved": item}

    @compensation(idempotent=True)
    def release(self, ctx: CompensationContext) -> dict[str, Any]:
        return self._undo(ctx)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, order: str, amount: int) -> str:
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO fault_wires (saga_id, amount, pid) VALUES (%s, %s, %s)",
                (order, amount, os.getpid()),
            )
        return f"wired {amount} for {order}"


tools = Shop(os.environ.get("FAULT_TOOLS_DSN"))
"""The instance the services load (``--tools bench._fault_tools:tools``)."""
