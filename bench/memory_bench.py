"""Benchmark: a writer's memory and collector work against its sagas' length.

Run ``python -m bench.memory_bench`` (``--quick``: the same 1,000 sagas grown from 10 to 300
events only).
It opens 1,000 sagas on a :class:`~sagacity.producer.KafkaJournal`, grows each from 10 to
10,000 events, and prints::

    rss per open saga: N KiB at 10 events, M KiB at 10,000 events

(target: M ≤ 1.2 N: the writer holds each saga's head, not its chain), the Python heap's
allocated blocks per open saga at both lengths (what the writer holds, exactly: RSS also moves
with the allocator's pools, which the growth's ten million short-lived events leave partly
used), then the cyclic collector's time per event while 256 of those sagas grow further
(target ≤ 1 µs).

Where the events go: the sagas are opened on the broker at ``SAGACITY_BOOTSTRAP_SERVERS``
(else this checkout's local stack), on a topic made for the run and deleted after; each
opening is a confirmed append, read back.  Their growth — ten million events in the full
form — goes through the journal's own hot path (``KafkaJournal.append``: the held head,
linking and encoding, the producer call, delivery tracking on the journal's poll thread) into
:class:`AckingProducer`, which stands in for the broker's acknowledgements in this process:
the writer's memory is what is measured, not a shared broker's disk.  ``--broker`` sends the
growth to the broker instead (meant for ``--quick`` sizes).

RSS is read from ``/proc/self/statm`` after a full collection and ``malloc_trim``; growth stops
early (and says so) past ``--max-rss-mib``, so a writer that holds its chains again cannot
exhaust a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import datetime as dt
import gc
import os
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: no __all__
    AdminClient,
    NewTopic,
)

from sagacity import EntryDraft, EventType
from sagacity._native import path_in_use
from sagacity.entries._events import JournalEntry
from sagacity.producer import KafkaJournal

PARTITIONS = 12
PAYLOAD = '{"order_id":"ord-0001","amount":"129.90","currency":"EUR","to":"acct-778812"}'
RESULT = '{"charge_id":"ch_1M2n3","status":"succeeded"}'
BATCH = 100
"""Events a saga gets per round: a durable ``INTENT`` (the lease's renewal), then pipelined."""
COLLECTOR_SAGAS = 256
WARM_SAGAS = 50


class _Acked:
    """The part of a delivered ``confluent_kafka.Message`` a delivery report reads."""

    __slots__ = ("_offset",)

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


Report = Callable[[Any, Any], None]


class AckingProducer:
    """Stands in for ``confluent_kafka.Producer`` where the broker would acknowledge: each
    produced event is acknowledged (an offset per partition) by the next ``poll`` or ``flush``,
    on the calling thread as librdkafka does, and its bytes are dropped."""

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Report, int]] = collections.deque()
        self._ready = threading.Event()
        self._offsets: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        headers: Any = None,
        on_delivery: Report | None = None,
    ) -> None:
        if on_delivery is not None:
            self._queue.append((on_delivery, partition))
            self._ready.set()

    def _serve(self) -> int:
        served = 0
        while True:
            try:
                report, partition = self._queue.popleft()
            except IndexError:
                return served
            with self._lock:
                offset = self._offsets[partition]
                self._offsets[partition] = offset + 1
            report(None, _Acked(offset))
            served += 1

    def poll(self, timeout: float = -1) -> int:
        if not self._queue:
            self._ready.wait(None if timeout < 0 else timeout)
        self._ready.clear()
        return self._serve()

    def flush(self, timeout: float = -1) -> int:
        self._serve()
        return 0


class Acknowledgements:
    """Who acknowledges ``journal``'s events: the broker (its own producer) or, with
    :meth:`in_process`, an :class:`AckingProducer`; everything else of the journal is its own.
    Each switch flushes what was published before it."""

    def __init__(self, journal: KafkaJournal, *, broker_only: bool) -> None:
        self._journal = journal
        self._broker = journal._producer
        self._fake = AckingProducer()
        self._broker_only = broker_only

    def _use(self, producer: Any) -> None:
        self._journal.flush()
        self._journal._producer = producer
        self._journal._deliveries._producer = producer  # what its poll thread polls

    def in_process(self) -> None:
        """Acknowledged here (unless the run grows on the broker)."""
        if not self._broker_only:
            self._use(self._fake)

    def broker(self) -> None:
        """Acknowledged by the broker: opening a saga reads it back from there."""
        self._use(self._broker)


def rss_bytes() -> int:
    """This process's resident set after a full collection and, with glibc, handing freed
    memory back (``malloc_trim``)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def heap_blocks() -> int:
    """The Python heap's allocated blocks after a full collection: every object the process
    holds, counted exactly (no allocator pools, no pages)."""
    gc.collect()
    return sys.getallocatedblocks()


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def held_entries(root: object) -> int:
    """The journal entries ``root`` reaches (attributes, containers, bound methods)."""
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


def _intent(saga: str) -> EntryDraft:
    return EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="charge", payload=PAYLOAD)


def _executed(saga: str, ref_seq: int) -> EntryDraft:
    return EntryDraft(
        saga_id=saga,
        event_type=EventType.EXECUTED,
        tool="charge",
        result=RESULT,
        attributes={"ref_seq": str(ref_seq)},
    )


def _extend(journal: KafkaJournal, saga: str, events: int) -> None:
    """``events`` more events: a durable ``INTENT``, then pipelined outcomes and intents."""
    ref = journal.append(_intent(saga)).seq
    for n in range(1, events):
        if n % 2:
            journal.append(_executed(saga, ref), durable=False)
        else:
            ref = journal.append(_intent(saga), durable=False).seq


def grow(
    journal: KafkaJournal, sagas: list[str], start: int, target: int, max_rss: int
) -> tuple[int, bool]:
    """Round by round, every saga from ``start`` to ``target`` events; the length reached, and
    whether growth stopped at ``max_rss``."""
    length = start
    while length < target:
        step = min(BATCH, target - length)
        for saga in sagas:
            _extend(journal, saga, step)
        journal.flush()
        length += step
        if length < target and rss_bytes() > max_rss:
            return length, True
    return length, False


class CollectorClock:
    """The time the cyclic garbage collector runs, from its start and stop callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections += 1

    @contextlib.contextmanager
    def running(self) -> Iterator[CollectorClock]:
        gc.callbacks.append(self._callback)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._callback)


@contextlib.contextmanager
def _broker() -> Iterator[str]:
    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield bootstrap
        return
    from sagacity.dev import Stack

    stack = Stack()
    endpoints = stack.up(kafka=True, postgres=False)
    try:
        assert endpoints.bootstrap_servers is not None
        yield endpoints.bootstrap_servers
    finally:
        if "kafka" in endpoints.started:
            stack.down(kafka=True, postgres=False)


@contextlib.contextmanager
def _topic(bootstrap: str) -> Iterator[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench.memory.{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    ).values():
        future.result(30)
    try:
        yield topic
    finally:
        for future in admin.delete_topics([topic]).values():
            with contextlib.suppress(Exception):
                future.result(30)


def _kib(total: int, sagas: int) -> float:
    return total / sagas / 1024


def opened(
    journal: KafkaJournal, acks: Acknowledgements, count: int, events: int, prefix: str
) -> list[str]:
    """``count`` sagas opened on the broker (confirmed appends, read back), then grown to
    ``events`` events each through the in-process acknowledgements."""
    acks.broker()
    sagas = [f"{prefix}-{n}-{uuid.uuid4().hex[:8]}" for n in range(count)]
    for saga in sagas:
        journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    acks.in_process()
    grow(journal, sagas, 1, events, max_rss=sys.maxsize)
    return sagas


def collector_time(journal: KafkaJournal, sagas: list[str], rounds: int) -> tuple[float, int, int]:
    """The collector's seconds and collections while ``sagas`` get ``rounds`` batches each,
    and the events appended."""
    events = 0
    with CollectorClock().running() as clock:
        for _ in range(rounds):
            for saga in sagas:
                _extend(journal, saga, BATCH)
            events += BATCH * len(sagas)
        journal.flush()
    return clock.seconds, clock.collections, events


def run(args: argparse.Namespace) -> int:
    """The bench; non-zero when a target is missed."""
    count: int = args.sagas
    first: int = args.first
    with _broker() as bootstrap, _topic(bootstrap) as topic:
        # A lease no round outlasts: a lapsed one makes the next append a confirmed one,
        # which reads the event back from the broker.
        journal = KafkaJournal(bootstrap, topic=topic, lease_ttl_s=3600)
        acks = Acknowledgements(journal, broker_only=args.broker)
        try:
            # Warm-up: one-time costs go into the baseline — clients, caches, code paths, and
            # the allocator's high-water mark of events in flight (a round's, not a saga's).
            warm = opened(journal, acks, WARM_SAGAS, first, "warm")
            grow(journal, warm, first, first + 3 * BATCH, max_rss=sys.maxsize)
            base = rss_bytes()
            base_blocks = heap_blocks()
            sagas = opened(journal, acks, count, first, "saga")
            at_first = rss_bytes() - base
            blocks_first = heap_blocks() - base_blocks
            started = time.monotonic()
            reached, stopped = grow(journal, sagas, first, args.events, args.max_rss_mib << 20)
            grew_s = time.monotonic() - started
            at_last = rss_bytes() - base
            blocks_last = heap_blocks() - base_blocks
            held = held_entries(journal)
            if count < COLLECTOR_SAGAS:
                sagas += opened(journal, acks, COLLECTOR_SAGAS - count, first, "more")
            seconds, collections, events = collector_time(
                journal, sagas[:COLLECTOR_SAGAS], args.collector_rounds
            )
        finally:
            journal.close()

    ratio = at_last / at_first if at_first > 0 else float("inf")
    per_event_us = seconds / events * 1e6
    compiled, _ = path_in_use()
    print(
        f"rss per open saga: {_kib(at_first, count):.1f} KiB at {first:,} events, "
        f"{_kib(at_last, count):.1f} KiB at {reached:,} events "
        f"({ratio:.2f}x; target <= 1.2x; {count:,} sagas)"
        + (f"; growth STOPPED past --max-rss-mib {args.max_rss_mib}" if stopped else "")
    )
    print(
        f"python heap per open saga: {blocks_first / count:.1f} blocks at {first:,} events, "
        f"{blocks_last / count:.1f} blocks at {reached:,} events "
        f"({blocks_last / blocks_first if blocks_first > 0 else float('inf'):.2f}x)"
    )
    print(
        f"collector time per event at {COLLECTOR_SAGAS} sagas: {per_event_us:.3f} µs "
        f"(target <= 1 µs; {collections} collections over {events:,} events)"
    )
    print(
        f"journal entries the writer holds: {held}; growth: {(reached - first) * count:,} "
        f"events in {grew_s:.0f} s, acknowledged "
        f"{'by the broker' if args.broker else 'in process'}; "
        f"{'compiled' if compiled else 'Python'} path"
    )
    print(
        f"run {dt.date.today().isoformat()}, load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    return 1 if stopped or ratio > 1.2 or per_event_us > 1.0 else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="grow from 10 to 300 events only")
    parser.add_argument("--sagas", type=int, default=None, help="open sagas (1,000)")
    parser.add_argument("--first", type=int, default=10, help="events per saga at first (10)")
    parser.add_argument("--events", type=int, default=None, help="events per saga (10,000)")
    parser.add_argument(
        "--collector-rounds", type=int, default=None, help=f"rounds of {BATCH} events (20)"
    )
    parser.add_argument("--broker", action="store_true", help="grow on the broker too")
    parser.add_argument("--max-rss-mib", type=int, default=4096, help="stop growing past it")
    args = parser.parse_args(argv)
    args.sagas = args.sagas or 1000
    args.events = args.events or (300 if args.quick else 10_000)
    args.collector_rounds = args.collector_rounds or (4 if args.quick else 20)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
