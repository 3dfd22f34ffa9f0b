"""Who may write each saga of a batch, folded from its archived rows (the writer registry's
roles, docs/adr/0014-signed-decisions-and-writers.md §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import psycopg

from sagacity._events import EventType
from sagacity._writer_roles import HANDOFF_EVENTS, SagaWriters

_STATE_EVENTS = sorted({EventType.SAGA_OPENED.value, *(e.value for e in HANDOFF_EVENTS)})
"""The event types that change a saga's writers (the others only count)."""


@dataclass(frozen=True, slots=True)
class _Row:
    event_type: str
    actor: str | None
    attributes: Mapping[str, str]


def writers_of(
    conn: psycopg.Connection | psycopg.Cursor, heads: Mapping[str, tuple[int, str]]
) -> dict[str, SagaWriters]:
    """Per saga of ``heads`` (its archived head), its writers after its archived chain."""
    if not heads:
        return {}
    saga_ids: Sequence[str] = sorted(heads)
    found: dict[str, SagaWriters] = {s: SagaWriters() for s in saga_ids}
    rows = conn.execute(
        "SELECT saga_id, event_type, actor, attributes->>'writer', attributes->>'handoff'"
        " FROM side_effect_journal WHERE saga_id = ANY(%s) AND event_type = ANY(%s)"
        " ORDER BY saga_id, seq",
        (list(saga_ids), _STATE_EVENTS),
    ).fetchall()
    for saga_id, event_type, actor, writer, handoff in rows:
        attributes = {k: v for k, v in (("writer", writer), ("handoff", handoff)) if v}
        found[saga_id] = found[saga_id].after(_Row(event_type, actor, attributes))
    return {s: replace(w, events=heads[s][0]) for s, w in found.items()}
