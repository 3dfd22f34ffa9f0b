"""Helpers shared by the archive tests: chains of entries, raw Kafka-like events."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import psycopg

from sagacity.chain import committing, link
from sagacity.consumers.archive import RawEvent
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.schemas import decode_entry, encode_entry

# 2026-03-15T12:00:00Z in microseconds.
BASE_US = 1_773_576_000_000_000


def make_chain(
    saga_id: str,
    n: int,
    *,
    start_us: int = BASE_US,
    step_us: int = 1_000,
    form: int = 1,
    times_us: Sequence[int] | None = None,
) -> list[JournalEntry]:
    """A valid chain of ``n`` entries for ``saga_id``, in chain ``form`` 1 or 2 (salted
    commitments to the data, docs/adr/0019-erasure.md): a saga opened, then calls, each
    ``INTENT`` (even seqs) followed by its ``EXECUTED`` (a story the saga grammar accepts).
    Entry ``seq`` is recorded at ``start_us + seq * step_us``, or at ``times_us[seq - 1]``."""
    out: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq in range(1, n + 1):
        kind = (
            EventType.SAGA_OPENED
            if seq == 1
            else (EventType.EXECUTED if seq % 2 else EventType.INTENT)
        )
        draft = EntryDraft(
            saga_id=saga_id,
            event_type=kind,
            tool=None if seq == 1 else "refund",
            payload=None
            if seq == 1
            else json.dumps(
                {"order": seq, "note": "é ✓"}, separators=(",", ":"), ensure_ascii=False
            ),
            result="ok" if kind is EventType.EXECUTED else None,
            actor="writer-1" if seq == 1 else None,
            attributes={"ref_seq": str(seq - 1)} if kind is EventType.EXECUTED else {},
            recorded_at_us=start_us + seq * step_us if times_us is None else times_us[seq - 1],
        )
        entry = link(committing(draft) if form == 2 else draft, seq=seq, prev_hash=prev)
        out.append(entry)
        prev = entry.hash
    return out


encode: Callable[[JournalEntry], bytes] = encode_entry
decode: Callable[[bytes], JournalEntry] = decode_entry


def as_raw(
    entries: list[JournalEntry], *, topic: str = "t", partition: int = 0, first_offset: int = 0
) -> list[RawEvent]:
    """Kafka-like messages for ``entries``, at consecutive offsets."""
    return [
        RawEvent(
            topic=topic,
            partition=partition,
            offset=first_offset + i,
            key=e.saga_id.encode(),
            value=encode(e),
        )
        for i, e in enumerate(entries)
    ]


def rows(dsn: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def with_option(dsn: str, option: str) -> str:
    """``dsn`` with one more server option (``-c name=value``) added to its ``options``."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options', '')} {option}".strip()
    return make_conninfo(**params)  # type: ignore[arg-type]
