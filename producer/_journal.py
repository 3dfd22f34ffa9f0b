"""``KafkaJournal``: the journal port on a per-saga keyed Kafka topic.

Hot path (a saga this process opened): an ``INTENT`` appended with ``durable=True`` returns
once the broker acknowledged it (``acks=all``, idempotent producer) — one round trip; outcome
events are pipelined (``durable=False``) and awaited by :meth:`KafkaJournal.flush`.  Every other
append — opening a saga, deciding on one handed off to approvals, compensating — reads the
saga's partition, extends the accepted tail and reads it back to confirm it won
(docs/adr/0004-single-writer.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from sagacity._events import EntryDraft, EventType, JournalEntry
from sagacity.chain import link
from sagacity.errors import (
    EventTooLargeError,
    JournalUnavailableError,
    SerializationError,
    TailMovedError,
    TopicConfigError,
    WriterConflictError,
)
from sagacity.journal import ApprovalRequest
from sagacity.producer._config import DEFAULT_TOPIC, KafkaJournalSettings
from sagacity.producer._reader import HANDOFF_EVENTS, SagaRead, SagaReader
from sagacity.producer._topic import (
    PRODUCER_MAX_MESSAGE_BYTES,
    ClientConfig,
    TopicInfo,
    compaction_refusal,
    describe,
)
from sagacity.producer._trace import current_traceparent, valid_traceparent
from sagacity.schemas import current_schema, encode_entry

RECORD_OVERHEAD = 128
"""Bytes reserved beyond key, value and headers for Kafka's record and batch framing."""

_PARTITION_CACHE = 100_000
_JSON_PAYLOAD_EVENTS = frozenset({EventType.INTENT, EventType.AWAITING_APPROVAL})


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_json_payload(draft: EntryDraft) -> None:
    """Refuse a tool payload that is not JSON (before the tool can run).

    Raises:
        SerializationError: the payload of an ``INTENT`` / ``AWAITING_APPROVAL`` is not JSON.
    """
    if draft.event_type not in _JSON_PAYLOAD_EVENTS or draft.payload is None:
        return
    try:
        json.loads(draft.payload, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise SerializationError(
            f"the {draft.event_type.value} payload of tool {draft.tool!r} is not JSON: {exc}",
            saga_id=draft.saga_id,
        ) from exc


class _Delivery:
    """One produced event awaiting the broker's acknowledgement.

    Waiting objects are made only when someone waits: most pipelined events are never
    waited on one by one, and a ``threading.Event`` per event is measurable on the hot path.
    """

    __slots__ = ("_event", "_lock", "_waiters", "done", "entry", "error", "offset")

    def __init__(self, entry: JournalEntry) -> None:
        self.entry = entry
        self.done = False
        self.error: KafkaError | None = None
        self.offset = -1
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def settle(self, error: KafkaError | None, message: Message | None) -> None:
        with self._lock:
            self.error = error
            if error is None and message is not None:
                offset = message.offset()
                self.offset = offset if offset is not None else -1
            self.done = True
            event = self._event
            waiters, self._waiters = self._waiters, []
        if event is not None:
            event.set()
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def wait(self, timeout: float) -> bool:
        """Block until acknowledged or refused; ``False`` when ``timeout`` passed first."""
        with self._lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def async_waiter(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self.done:
                future.set_result(None)
            else:
                self._waiters.append((loop, future))
        return future


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _tail_moved(saga_id: str, after_seq: int, tail: int) -> TailMovedError:
    return TailMovedError(
        f"saga {saga_id!r} is at seq {tail}, not {after_seq}: another writer appended since it "
        "was read; nothing was appended",
        saga_id=saga_id,
        seq=tail,
    )


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _SagaState:
    """Per-saga serialisation, and the chain while this process owns the saga."""

    __slots__ = ("__weakref__", "actor", "chain", "lock", "owned", "pending", "poisoned")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.actor: str | None = None
        self.owned = False
        self.poisoned = False
        self.chain: list[JournalEntry] = []
        self.pending: list[_Delivery] = []


class KafkaJournal:
    """The :class:`~sagacity.Journal` port on Kafka; one instance per process, shared by all
    sagas, safe under threads and asyncio.

    Args:
        bootstrap_servers: ``host:port[,…]`` of the cluster.
        topic: the journal topic (created with ``sagacity topic create``).
        ack_timeout_s: the longest a durable append waits for the broker; past it the append
            raises :class:`JournalUnavailableError` (for an ``INTENT``: the tool is not called).
        startup_timeout_s: the longest start-up waits for the cluster.
        read_timeout_s: the longest reading one partition may take.
        client: extra librdkafka settings (TLS/SASL, tuning).
        writer_id: this writer's id, recorded as the actor of the ``SAGA_OPENED`` events it
            writes; unique per instance by default.

    Raises:
        TopicNotFoundError: the topic does not exist.
        TopicConfigError: the topic compacts its log (that would erase history).
        JournalUnavailableError: the cluster could not be reached within the start-up timeout.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = DEFAULT_TOPIC,
        ack_timeout_s: float = 10.0,
        startup_timeout_s: float = 10.0,
        read_timeout_s: float = 30.0,
        client: Mapping[str, str] | None = None,
        writer_id: str | None = None,
    ) -> None:
        settings = KafkaJournalSettings(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            ack_timeout_s=ack_timeout_s,
            startup_timeout_s=startup_timeout_s,
            read_timeout_s=read_timeout_s,
            client=dict(client or {}),
        )
        self._settings = settings
        self._topic = settings.topic
        self._ack_timeout = settings.ack_timeout_s
        self.writer_id = (
            writer_id or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        )
        base: ClientConfig = {"bootstrap.servers": settings.bootstrap_servers, **settings.client}
        admin = AdminClient(base)
        info = describe(
            admin,
            self._topic,
            bootstrap=settings.bootstrap_servers,
            timeout=settings.startup_timeout_s,
        )
        if info.compacted:
            raise TopicConfigError(compaction_refusal(self._topic), topic=self._topic)
        self.topic_info: TopicInfo = info
        producer_max = int(settings.client.get("message.max.bytes", PRODUCER_MAX_MESSAGE_BYTES))
        self.max_event_bytes = min(info.max_message_bytes, producer_max)
        """The largest event (key, value, headers and framing) the topic and producer take."""
        ack_ms = int(self._ack_timeout * 1000)
        self._producer = Producer(
            {
                "linger.ms": 0,
                "batch.size": min(self.max_event_bytes, PRODUCER_MAX_MESSAGE_BYTES),
                **base,
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "message.timeout.ms": ack_ms,
                "request.timeout.ms": min(ack_ms, 30_000),
            }
        )
        self._reader = SagaReader(
            base, self._topic, partitions=info.partitions, timeout=settings.read_timeout_s
        )
        self._states: weakref.WeakValueDictionary[str, _SagaState] = weakref.WeakValueDictionary()
        self._owned: dict[str, _SagaState] = {}
        self._partitions: dict[str, int] = {}
        self._states_lock = threading.Lock()
        self._failures: list[_Delivery] = []
        self._failures_lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="sagacity-kafka-poll", daemon=True)
        self._poller.start()

    @classmethod
    def from_settings(
        cls, settings: KafkaJournalSettings, *, writer_id: str | None = None
    ) -> KafkaJournal:
        """A journal configured by ``settings``."""
        return cls(
            settings.bootstrap_servers,
            topic=settings.topic,
            ack_timeout_s=settings.ack_timeout_s,
            startup_timeout_s=settings.startup_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            client=settings.client,
            writer_id=writer_id,
        )

    # --- properties ------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        """The journal topic."""
        return self._topic

    @property
    def reader(self) -> SagaReader:
        """The journal's reader (shares its connection settings)."""
        return self._reader

    # --- writing ---------------------------------------------------------------------------
    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """Link ``draft`` to the tail of its saga's chain and publish it.

        On a saga this journal opened, ``durable=False`` pipelines the event (awaited by
        :meth:`flush`); any other append is durable and confirmed.  A ``SAGA_OPENED`` without
        an actor is recorded with this journal's :attr:`writer_id`.

        Raises:
            JournalUnavailableError: the broker did not acknowledge within the ack timeout.
            WriterConflictError: another writer owns the saga, or appended at this seq first.
            EventTooLargeError: the event exceeds the topic's or producer's size limit.
            SerializationError: an ``INTENT`` / ``AWAITING_APPROVAL`` payload is not JSON.
        """
        draft = self._prepare(draft)
        state = self._state(draft.saga_id)
        with state.lock:
            if not (state.owned and not state.poisoned):
                return self._append_confirmed(state, draft)
            entry, delivery = self._publish_owned(state, draft)
        if durable:
            self._wait(delivery)
        return entry

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        """:meth:`append` only onto a chain whose last seq is ``after_seq`` (compare-and-append).

        On a saga this journal does not own, the tail is read from the topic, the event
        published and read back: if another writer appended first — at any seq past
        ``after_seq`` — nothing of this call is accepted into the chain.

        Raises:
            TailMovedError: the chain is not at ``after_seq`` (read before publishing, or
                another writer won the seq); re-read and decide again.
            JournalUnavailableError / WriterConflictError / EventTooLargeError /
                SerializationError: as :meth:`append`.
        """
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise SerializationError(f"after_seq must be an int >= 0, got {after_seq!r}")
        draft = self._prepare(draft)
        state = self._state(draft.saga_id)
        with state.lock:
            if not (state.owned and not state.poisoned):
                return self._append_confirmed(state, draft, after_seq=after_seq)
            tail = state.chain[-1].seq
            if tail != after_seq:
                raise _tail_moved(draft.saga_id, after_seq, tail)
            entry, delivery = self._publish_owned(state, draft)
        if durable:
            self._wait(delivery)
        return entry

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """:meth:`append` without blocking the event loop.

        The hot path publishes from the loop (a non-blocking call) and awaits the
        acknowledgement as a future; confirmed appends run in the default executor.
        """
        draft = self._prepare(draft)
        state = self._state(draft.saga_id)
        loop = asyncio.get_running_loop()
        if state.lock.acquire(blocking=False):
            try:
                fast = state.owned and not state.poisoned
                if fast:
                    entry, delivery = self._publish_owned(state, draft)
            finally:
                state.lock.release()
            if fast:
                if durable:
                    await self._wait_async(delivery, loop)
                return entry
        return await loop.run_in_executor(None, lambda: self.append(draft, durable=durable))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event published so far is acknowledged.

        Raises:
            JournalUnavailableError: an event was refused, or not all were acknowledged within
                ``timeout`` (default: the ack timeout).
        """
        limit = self._ack_timeout + 1.0 if timeout is None else timeout
        remaining = self._producer.flush(limit)
        self._raise_failures()
        if remaining:
            raise JournalUnavailableError(
                f"{remaining} journal event(s) not acknowledged by Kafka within {limit:.1f}s"
            )

    # --- reading ---------------------------------------------------------------------------
    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's accepted chain in seq order (empty when unknown).

        For a saga this journal owns, the chain it wrote (after its pending events are
        acknowledged); otherwise read from the saga's partition.

        Raises:
            JournalUnavailableError: pending events failed, or the topic could not be read.
        """
        state = self._states.get(saga_id)
        if state is not None:
            with state.lock:
                if state.owned and not state.poisoned:
                    pending = list(state.pending)
                    chain = tuple(state.chain)
                else:
                    pending, chain = [], None
            for delivery in pending:
                self._wait(delivery)
            if chain is not None:
                return chain
        return tuple(self.read(saga_id).entries)

    def read(self, saga_id: str) -> SagaRead:
        """The saga as on the topic: accepted chain, tail, forks and skipped messages.

        Raises:
            JournalUnavailableError: the topic could not be read.
        """
        self._check_open()
        return self._reader.read(saga_id)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Open approval requests, derived from the chains on the topic.

        Without ``saga_id`` every partition is scanned (the approvals service keeps its own
        materialised view instead).

        Raises:
            JournalUnavailableError: the topic could not be read.
        """
        from sagacity._requests import pending_requests

        if saga_id is not None:
            return list(pending_requests(self.entries(saga_id)))
        self.flush()
        out: list[ApprovalRequest] = []
        for partition in range(self._reader.partitions):
            read = self._reader.read_partition(partition)
            for saga in sorted(read.sagas):
                out.extend(pending_requests(read.sagas[saga].entries))
        return sorted(out, key=lambda r: (r.saga_id, r.seq))

    def close(self) -> None:
        """Flush, then release the producer and reader; later appends are refused.

        Raises:
            JournalUnavailableError: events published before closing were not acknowledged.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            self._stop.set()
            self._poller.join(timeout=5)
            self._reader.close()

    def __enter__(self) -> KafkaJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise JournalUnavailableError(f"the Kafka journal on {self._topic!r} is closed")

    def _prepare(self, draft: EntryDraft) -> EntryDraft:
        self._check_open()
        check_json_payload(draft)
        if draft.event_type is EventType.SAGA_OPENED and draft.actor is None:
            draft = dataclasses.replace(draft, actor=self.writer_id)
        return draft

    def _state(self, saga_id: str) -> _SagaState:
        with self._states_lock:
            state = self._states.get(saga_id)
            if state is None:
                state = _SagaState()
                self._states[saga_id] = state
            return state

    def _partition(self, saga_id: str) -> int:
        partition = self._partitions.get(saga_id)
        if partition is None:
            partition = self._reader.partition_of(saga_id)
            if len(self._partitions) >= _PARTITION_CACHE:
                self._partitions.clear()
            self._partitions[saga_id] = partition
        return partition

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    def _headers(self, entry: JournalEntry) -> list[tuple[str, str | bytes | None]]:
        headers: list[tuple[str, str | bytes | None]] = [
            ("event_type", entry.event_type.value.encode()),
            ("saga_id", entry.saga_id.encode("utf-8")),
            ("schema_fingerprint", current_schema().fingerprint.hex().encode()),
        ]
        traceparent = valid_traceparent(current_traceparent.get())
        if traceparent is not None:
            headers.append(("traceparent", traceparent.encode()))
        return headers

    def _produce(self, entry: JournalEntry) -> _Delivery:
        """Publish ``entry`` (size-checked first); the caller holds the saga's lock."""
        key = entry.saga_id.encode("utf-8")
        value = encode_entry(entry)
        headers = self._headers(entry)
        size = len(key) + len(value) + sum(len(k) + len(v or b"") for k, v in headers)
        size += RECORD_OVERHEAD
        if size > self.max_event_bytes:
            raise EventTooLargeError(
                f"the {entry.event_type.value} event of saga {entry.saga_id!r} is {size} bytes; "
                f"topic {self._topic!r} and the producer accept at most {self.max_event_bytes}. "
                "Nothing was written (for an INTENT, the tool was not called)",
                size=size,
                limit=self.max_event_bytes,
                saga_id=entry.saga_id,
            )
        delivery = _Delivery(entry)
        partition = self._partition(entry.saga_id)
        deadline = time.monotonic() + self._ack_timeout
        while True:
            try:
                self._producer.produce(
                    self._topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=lambda err, msg: self._settled(delivery, err, msg),
                )
                return delivery
            except BufferError as exc:
                # The local queue is full: the poll thread drains it as acknowledgements come.
                if time.monotonic() > deadline:
                    raise JournalUnavailableError(
                        "the producer's queue stayed full: Kafka is not acknowledging",
                        saga_id=entry.saga_id,
                        seq=entry.seq,
                    ) from exc
                time.sleep(0.005)
            except KafkaException as exc:
                raise JournalUnavailableError(
                    f"Kafka refused the event: {exc}", saga_id=entry.saga_id, seq=entry.seq
                ) from exc

    def _settled(self, delivery: _Delivery, error: KafkaError | None, message: Message) -> None:
        delivery.settle(error, message)
        if error is not None:
            with self._failures_lock:
                self._failures.append(delivery)
            state = self._states.get(delivery.entry.saga_id)
            if state is not None:
                # The tail this process holds may not be on the topic: re-read before writing.
                state.poisoned = True

    def _raise_failures(self) -> None:
        with self._failures_lock:
            failures, self._failures = self._failures, []
        if failures:
            first = failures[0]
            raise JournalUnavailableError(
                f"{len(failures)} journal event(s) were not acknowledged by Kafka; first: "
                f"{first.entry.event_type.value} seq {first.entry.seq}: {first.error}",
                saga_id=first.entry.saga_id,
                seq=first.entry.seq,
            )

    def _publish_owned(
        self, state: _SagaState, draft: EntryDraft
    ) -> tuple[JournalEntry, _Delivery]:
        tail = state.chain[-1]
        entry = link(draft, seq=tail.seq + 1, prev_hash=tail.hash)
        delivery = self._produce(entry)
        state.chain.append(entry)
        state.pending = [d for d in state.pending if not d.done]
        state.pending.append(delivery)
        if entry.event_type in HANDOFF_EVENTS:
            self._release(draft.saga_id, state)
        return entry, delivery

    def _release(self, saga_id: str, state: _SagaState) -> None:
        state.owned = False
        state.actor = None
        state.chain = []
        with self._states_lock:
            self._owned.pop(saga_id, None)

    def _unacknowledged(self, entry: JournalEntry) -> JournalUnavailableError:
        """Poison ``entry``'s saga and return the error for its missing acknowledgement."""
        self._mark_poisoned(entry.saga_id)
        return JournalUnavailableError(
            f"Kafka did not acknowledge {entry.event_type.value} seq {entry.seq} of saga "
            f"{entry.saga_id!r} within {self._ack_timeout:.1f}s",
            saga_id=entry.saga_id,
            seq=entry.seq,
        )

    def _wait(self, delivery: _Delivery) -> None:
        entry = delivery.entry
        if not delivery.wait(self._ack_timeout + 0.5):
            raise self._unacknowledged(entry)
        self._check_delivery(delivery)

    async def _wait_async(self, delivery: _Delivery, loop: asyncio.AbstractEventLoop) -> None:
        entry = delivery.entry
        future = delivery.async_waiter(loop)
        # A timer instead of asyncio.wait_for: no extra task per event on the hot path.
        timer = loop.call_later(self._ack_timeout + 0.5, _expire, future)
        try:
            await future
        except TimeoutError as exc:
            raise self._unacknowledged(entry) from exc
        finally:
            timer.cancel()
        self._check_delivery(delivery)

    def _check_delivery(self, delivery: _Delivery) -> None:
        if delivery.error is None:
            return
        entry = delivery.entry
        with self._failures_lock:
            # Reported here, to the caller that waited; flush need not report it again.
            if delivery in self._failures:
                self._failures.remove(delivery)
        raise JournalUnavailableError(
            f"Kafka did not acknowledge {entry.event_type.value} seq {entry.seq} of saga "
            f"{entry.saga_id!r}: {delivery.error.str()}",
            saga_id=entry.saga_id,
            seq=entry.seq,
        )

    def _mark_poisoned(self, saga_id: str) -> None:
        state = self._states.get(saga_id)
        if state is not None:
            state.poisoned = True

    def _append_confirmed(
        self, state: _SagaState, draft: EntryDraft, *, after_seq: int | None = None
    ) -> JournalEntry:
        """Append by reading the tail, publishing durably and confirming; holds the lock."""
        saga_id = draft.saga_id
        for delivery in state.pending:
            # Let earlier events settle so the tail read below is final.
            delivery.wait(self._ack_timeout + 0.5)
        state.pending = []
        current = self._reader.read(saga_id)
        owner = current.ownership
        mine = owner.writer == self.writer_id or (
            state.actor is not None and owner.writer == state.actor
        )
        if owner.live and not mine:
            raise WriterConflictError(
                f"saga {saga_id!r} is open by writer {owner.writer!r} (SAGA_OPENED at seq "
                f"{owner.opened_seq}); it accepts events from another writer only after it "
                "hands the saga off (approval, compensation) or ends it",
                saga_id=saga_id,
            )
        seq, prev = current.tail
        if after_seq is not None and seq != after_seq:
            raise _tail_moved(saga_id, after_seq, seq)
        entry = link(draft, seq=seq + 1, prev_hash=prev)
        delivery = self._produce(entry)
        self._wait(delivery)
        confirm = self._reader.read(saga_id, until_offset=delivery.offset)
        if confirm.accepted_offset(entry.seq) != delivery.offset:
            winner = confirm.entries[entry.seq - 1] if len(confirm.entries) >= entry.seq else None
            who = f"{winner.event_type.value} by {winner.actor!r}" if winner else "another event"
            if after_seq is not None:
                raise TailMovedError(
                    f"another writer appended seq {entry.seq} of saga {saga_id!r} first ({who}); "
                    "nothing of this append is accepted into the chain: re-read and decide again",
                    saga_id=saga_id,
                    seq=entry.seq,
                )
            raise WriterConflictError(
                f"another writer appended seq {entry.seq} of saga {saga_id!r} first ({who}); "
                f"this {entry.event_type.value} is on the topic at offset {delivery.offset} as "
                "a fork that no reader accepts",
                saga_id=saga_id,
                seq=entry.seq,
            )
        state.poisoned = False
        takes_over = entry.event_type is EventType.SAGA_OPENED or (owner.live and mine)
        if takes_over and entry.event_type not in HANDOFF_EVENTS:
            state.owned = True
            state.actor = owner.writer if mine and owner.live else entry.actor
            if entry.event_type is EventType.SAGA_OPENED:
                state.actor = entry.actor
            state.chain = list(confirm.entries)
            with self._states_lock:
                self._owned[saga_id] = state
        else:
            self._release(saga_id, state)
        return entry
