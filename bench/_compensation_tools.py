"""Tools for the compensation benchmark: each undo records when it started, in Postgres."""

from __future__ import annotations

import os
import time

import psycopg

from sagacity import CompensationContext, compensable, compensation

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_undo_calls (
    saga_id text, seq int, started_at double precision, pid int
)
"""


class Payments:
    """One compensable tool whose undo only records its start time."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn

    @compensable(by="refund")
    def charge(self, order: str, amount: int) -> dict[str, object]:
        return {"order": order, "charged": amount}

    @compensation(idempotent=True)
    def refund(self, ctx: CompensationContext) -> str:
        started = time.time()
        assert self.dsn
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO bench_undo_calls VALUES (%s, %s, %s, %s)",
                (ctx.saga_id, ctx.seq, started, os.getpid()),
            )
        return "refunded"


tools = Payments(os.environ.get("BENCH_TOOLS_DSN"))
