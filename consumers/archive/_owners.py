"""Who may write each saga of a batch, folded from its archived rows (the writer registry's
roles, docs/adr/0014-signed-decisions-and-writers.md §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sagacity.chain import verify
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import SerializationError
from sagacity.ports import ArchivedEvents
from sagacity.signing._writer_roles import HANDOFF_EVENTS, SagaWriters

_STATE_EVENTS = sorted({EventType.SAGA_OPENED.value, *(e.value for e in HANDOFF_EVENTS)})
"""The event types that change a saga's writers (the others only count)."""


def writers_of(
    archive: ArchivedEvents, heads: Mapping[str, tuple[int, str]]
) -> dict[str, SagaWriters]:
    """Per saga of ``heads`` (its archived head), its writers after its archived chain."""
    if not heads:
        return {}
    saga_ids: Sequence[str] = sorted(heads)
    found: dict[str, SagaWriters] = {s: SagaWriters() for s in saga_ids}
    for event in archive.writer_events(saga_ids, _STATE_EVENTS):
        found[event.saga_id] = found[event.saga_id].after(event)
    return {s: replace(w, events=heads[s][0]) for s, w in found.items()}


def writers_up_to(
    archive: ArchivedEvents, bases: Mapping[str, tuple[int, str]]
) -> dict[str, SagaWriters | None]:
    """Per saga of ``bases`` (a head signed under the archive's key), its writers folded from
    its archived rows up to that head, once the rows are checked to hash to it; ``None`` when
    they do not (they were changed).  A saga whose first rows retention dropped cannot be
    checked from its start: its writers are folded from the rows left (unchecked)."""
    out: dict[str, SagaWriters | None] = {}
    if not bases:
        return out
    by_saga: dict[str, list[JournalEntry]] = {s: [] for s in bases}
    try:
        for entry in archive.archived_entries({s: seq for s, (seq, _hash) in bases.items()}):
            by_saga[entry.saga_id].append(entry)
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
