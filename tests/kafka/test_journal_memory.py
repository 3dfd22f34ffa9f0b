"""A writer's memory is flat in its sagas' length: it holds each saga's head, not its chain
(producer/_ownership.py), and its read cache is bounded in entries, not only in sagas."""

from __future__ import annotations

import asyncio
import gc
import types
import uuid
from collections.abc import Callable

import pytest

from sagacity import EntryDraft, EventType, verify
from sagacity.chain import GENESIS_HASH, link
from sagacity.entries._events import JournalEntry
from sagacity.producer import KafkaJournal
from sagacity.producer._reader import ReadCache, SagaRead

JournalFactory = Callable[..., KafkaJournal]

# Not followed: what every object reaches (its class, its module) and code.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def held_entries(root: object) -> int:
    """How many journal entries ``root`` reaches (through its attributes, containers, bound
    methods; not through classes, modules or functions)."""
    seen = {id(root)}
    stack = [root]
    count = 0
    while stack:
        obj = stack.pop()
        if isinstance(obj, JournalEntry):
            count += 1
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, _OPAQUE):
                seen.add(id(ref))
                stack.append(ref)
    return count


def _grow(journal: KafkaJournal, saga: str, calls: int) -> None:
    """``calls`` tool calls: a durable INTENT, a pipelined outcome."""
    for n in range(calls):
        intent = journal.append(
            EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload=f'{{"n":{n}}}')
        )
        journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=EventType.EXECUTED,
                tool="t",
                result=str(n),
                attributes={"ref_seq": str(intent.seq)},
            ),
            durable=False,
        )


async def _grow_async(journal: KafkaJournal, saga: str, calls: int) -> None:
    for n in range(calls):
        draft = EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="a", payload="{}")
        intent = await journal.append_async(draft)
        outcome = EntryDraft(
            saga_id=saga,
            event_type=EventType.EXECUTED,
            tool="a",
            result=str(n),
            attributes={"ref_seq": str(intent.seq)},
        )
        await journal.append_async(outcome, durable=False)


@pytest.mark.kafka
def test_a_writer_holds_no_more_entries_as_its_sagas_grow(
    topic: str, journal_factory: JournalFactory
) -> None:
    journal = journal_factory(topic)
    sagas = [f"long-{uuid.uuid4().hex}" for _ in range(3)]
    for saga in sagas:
        journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
        _grow(journal, saga, 5)
    journal.flush()
    short = held_entries(journal)

    for saga in sagas[:2]:
        _grow(journal, saga, 150)
    asyncio.run(_grow_async(journal, sagas[2], 150))
    journal.flush()
    long = held_entries(journal)

    # The same whether the sagas have 11 events or 311: at most the openings its read cache
    # keeps (the chains would be 933 entries).
    assert long == short, (short, long)
    assert long <= len(sagas)
    # The journal still extends each saga on its hot path (no read per append) …
    assert all(journal._sagas.states[s].owned for s in sagas)
    # … and its chain is there to read, whole and valid.
    for saga in sagas:
        chain = journal.entries(saga)
        assert [e.seq for e in chain] == list(range(1, 312))
        assert verify(chain, saga_id=saga).ok
    assert held_entries(journal) <= len(sagas) * 311  # read, then cached (bounded)


def _read(saga: str, length: int, next_offset: int) -> SagaRead:
    entries, prev = [], GENESIS_HASH
    for seq in range(1, length + 1):
        entry = link(
            EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload="{}"),
            seq=seq,
            prev_hash=prev,
        )
        entries.append(entry)
        prev = entry.hash
    return SagaRead(
        saga_id=saga,
        partition=0,
        entries=entries,
        offsets=list(range(length)),
        next_offset=next_offset,
    )


def test_the_read_cache_is_bounded_in_entries() -> None:
    cache = ReadCache(size=10, entries=50)
    for n in range(6):
        cache.put(_read(f"s{n}", 20, next_offset=20))
    assert held_entries(cache) <= 50
    assert cache.get("s5") is not None
    assert cache.get("s4") is not None
    assert cache.get("s0") is None  # least recently used out
    # A continued read replaces the saga's earlier one (not counted twice).
    cache.put(_read("s5", 30, next_offset=30))
    assert held_entries(cache) <= 50
    continued = cache.get("s5")
    assert continued is not None
    assert len(continued.entries) == 30
    # One read longer than the whole bound is not kept (the next read starts over).
    cache.put(_read("huge", 51, next_offset=51))
    assert cache.get("huge") is None
    assert held_entries(cache) <= 50
