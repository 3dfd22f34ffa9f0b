"""Where the journal's calling thread spends its time: ``python -m bench.journal_bench --profile``.

cProfile over the two shapes the bench measures, each in clear and sealed: one tool call at a
time (the durable ``INTENT`` then the pipelined ``EXECUTED``) and 256 concurrent sagas of 40
tool calls (asyncio).  Sagas are opened and ended outside the profile, as in the bench.  The
profiler slows every Python call alike, so read the shares, not the absolute times; the
calling-thread CPU per event printed with each is measured without the profiler.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import time
import uuid
from collections.abc import Callable

from sagacity import EntryDraft, EventType
from sagacity.producer import KafkaJournal

Draft = Callable[..., EntryDraft]
TOP = 22


def _calls(journal: KafkaJournal, saga: str, calls: int, intent: Draft, executed: Draft) -> None:
    for _ in range(calls):
        entry = journal.append(intent(saga))
        journal.append(executed(saga, entry.seq), durable=False)
    journal.flush()


async def _crowd(
    journal: KafkaJournal, sagas: list[str], calls: int, intent: Draft, executed: Draft
) -> None:
    async def run(saga: str) -> None:
        for _ in range(calls):
            entry = await journal.append_async(intent(saga))
            await journal.append_async(executed(saga, entry.seq), durable=False)

    await asyncio.gather(*(run(s) for s in sagas))
    await asyncio.get_running_loop().run_in_executor(None, journal.flush)


def _print(title: str, profiler: cProfile.Profile, events: int, cpu: float) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(TOP)
    print(f"\n=== {title}: {events} events, calling-thread CPU {cpu / events * 1e6:.1f} µs/event")
    print("\n".join(out.getvalue().splitlines()[4:]))


def _shape(
    journal: KafkaJournal,
    title: str,
    sagas: int,
    calls: int,
    intent: Draft,
    executed: Draft,
) -> None:
    names = [f"prof{sagas}-{i}-{uuid.uuid4().hex[:6]}" for i in range(sagas)]
    for saga in names:
        journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))

    def work() -> None:
        if sagas == 1:
            _calls(journal, names[0], calls, intent, executed)
        else:
            asyncio.run(_crowd(journal, names, calls, intent, executed))

    cpu = time.thread_time()
    work()  # unprofiled: the CPU per event
    cpu = time.thread_time() - cpu
    profiler = cProfile.Profile()
    profiler.enable()
    work()
    profiler.disable()
    for saga in names:
        journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_ENDED, result="OK"))
    _print(title, profiler, 2 * sagas * calls, cpu)


def profile(
    journal: KafkaJournal, sealed: KafkaJournal, calls: int, intent: Draft, executed: Draft
) -> None:
    """Print the profiles of one tool call at a time and of 256 sagas, clear and sealed."""
    for side, j in (("clear", journal), ("sealed", sealed)):
        _shape(j, f"{side}: one tool call at a time", 1, calls, intent, executed)
        _shape(j, f"{side}: 256 concurrent sagas", 256, 40, intent, executed)
