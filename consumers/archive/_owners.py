"""Who may write each saga of a batch, folded from its archived rows (the writer registry's
roles, docs/adr/0014-signed-decisions-and-writers.md §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import psycopg

from sagacity.chain import verify
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import SerializationError
from sagacity.postgres.archive import FORM_COLUMNS, ROW_COLUMNS, entry_of_row
from sagacity.signing._writer_roles import HANDOFF_EVENTS, SagaWriters

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


def writers_up_to(
    conn: psycopg.Connection, bases: Mapping[str, tuple[int, str]]
) -> dict[str, SagaWriters | None]:
    """Per saga of ``bases`` (a head signed under the archive's key), its writers folded from
    its archived rows up to that head, once the rows are checked to hash to it; ``None`` when
    they do not (they were changed).  A saga whose first rows retention dropped cannot be
    checked from its start: its writers are folded from the rows left (unchecked)."""
    out: dict[str, SagaWriters | None] = {}
    if not bases:
        return out
    rows = conn.execute(
        f"SELECT {ROW_COLUMNS}{FORM_COLUMNS} FROM side_effect_journal"  # noqa: S608
        " WHERE saga_id = ANY(%s) ORDER BY saga_id, seq, archive_id",
        (sorted(bases),),
    ).fetchall()
    by_saga: dict[str, list[JournalEntry]] = {s: [] for s in bases}
    try:
        for row in rows:
            if int(row[1]) <= bases[row[0]][0]:
                by_saga[row[0]].append(entry_of_row(row, forms=True))
    except SerializationError:
        return dict.fromkeys(bases)
    for saga_id, entries in by_saga.items():
        seq, hash = bases[saga_id]
        if entries and entries[0].seq > 1:
            out[saga_id] = replace(SagaWriters.of(entries), events=seq)
            continue
        verdict = verify(entries, saga_id=saga_id)
        ok = verdict.ok and (verdict.head_seq, verdict.head_hash) == (seq, hash)
        out[saga_id] = SagaWriters.of(entries) if ok else None
    return out
