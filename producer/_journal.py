"""``KafkaJournal``: the journal port on a per-saga keyed Kafka topic.

Hot path (a saga this process opened): an ``INTENT`` appended with ``durable=True`` returns
once the broker acknowledged it (``acks=all``, idempotent producer) — one round trip; outcome
events are pipelined (``durable=False``) and awaited by :meth:`KafkaJournal.flush`.  Every other
append — opening a saga, deciding on one handed off to approvals, compensating — reads the
saga's partition, extends the accepted tail and reads it back to confirm it won
(docs/adr/0004-single-writer.md).

Around it: :mod:`._delivery` tracks each published event until the broker answers (and who
waits for that), :mod:`._ownership` the sagas this process holds (their head and writer lease,
never their chain), :mod:`._reader` reads sagas back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import KafkaException

from sagacity.chain import link
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry, with_attribute
from sagacity.errors import (
    ConfigurationError,
    EventTooLargeError,
    JournalUnavailableError,
    SerializationError,
    SigningKeyError,
    TailMovedError,
    WriterConflictError,
)
from sagacity.journal import ApprovalRequest
from sagacity.privacy._redaction import refuse_in_form_1
from sagacity.producer._config import DEFAULT_TOPIC, KafkaJournalSettings
from sagacity.producer._delivery import Deliveries, Delivery, earlier_unsettled, require_gil
from sagacity.producer._headers import EVENT_TYPE_HEADERS, fingerprint_header, type_header_of
from sagacity.producer._index import SagaIndex
from sagacity.producer._lease import (
    LeaseView,
    Takeover,
    judge_lease,
    lease_held,
    takeover_draft,
)
from sagacity.producer._ownership import HeldSagas, SagaState, tail_moved
from sagacity.producer._reader import HANDOFF_EVENTS, ReadCache, SagaRead, SagaReader
from sagacity.producer._topic import (
    PRODUCER_MAX_MESSAGE_BYTES,
    ClientConfig,
    TopicInfo,
    journal_identity,
)
from sagacity.producer._trace import current_traceparent, valid_traceparent
from sagacity.producer._wiring import Given, described, journal_producer, writer_id_of
from sagacity.schemas import encode_entry, link_encoded
from sagacity.schemas._hotpath import link_encoded_sealed
from sagacity.schemas._sealed import FieldSealer
from sagacity.signing._writer_signature import HEADER as WRITER_HEADER
from sagacity.signing._writer_signature import WriterKey, WriterRegistry
from sagacity.telemetry._tracing import header_traceparent
from sagacity.tools._codec import check_json_payload

RECORD_OVERHEAD = 128
"""Bytes reserved beyond key, value and headers for Kafka's record and batch framing."""

_ROUTE_CACHE = 100_000


_Route = tuple[bytes, int, tuple[str, bytes], int]
"""A saga's message key, partition, ``saga_id`` header and fixed size (``KafkaJournal._route``)."""


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
        lease_ttl_s: the writer lease recorded on its ``SAGA_OPENED`` events
            (docs/adr/0011-writer-lease.md); must exceed ``2 * ack_timeout_s + 1``.
        max_clock_skew_s: the wall-clock skew a takeover allows for.
        monotonic / wall_clock: the clocks the lease is measured on (``time.monotonic``,
            ``time.time``); replaceable to simulate a paused writer or a late taker.
        index: where reads find sagas' archived prefixes instead of scanning partitions from
            their start (docs/adr/0010-saga-read-index.md); closed with the journal.
        keys: the key service (:class:`sagacity.privacy._keys.KeyService`): sagas opened by this
            journal are written in chain form 2, their data sealed on the topic, and reads
            open them (docs/adr/0019-erasure.md); not with ``index`` (ConfigurationError).

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
        lease_ttl_s: float = 60.0,
        max_clock_skew_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        index: SagaIndex | None = None,
        writer_key: WriterKey | None = None,
        keys: FieldSealer | None = None,
        journal_name: str | None = None,
        writers: WriterRegistry | None = None,
    ) -> None:
        require_gil()
        try:
            settings = KafkaJournalSettings(
                bootstrap_servers=bootstrap_servers,
                topic=topic,
                ack_timeout_s=ack_timeout_s,
                startup_timeout_s=startup_timeout_s,
                read_timeout_s=read_timeout_s,
                lease_ttl_s=lease_ttl_s,
                max_clock_skew_s=max_clock_skew_s,
                client=dict(client or {}),
            )
        except ValueError as exc:
            raise ConfigurationError(f"invalid Kafka journal settings: {exc}") from exc
        given = Given(
            writer_id=writer_id,
            writer_key=writer_key,
            journal_name=journal_name,
            monotonic=monotonic,
            wall_clock=wall_clock,
            index=index,
            keys=keys,
            writers=writers,
        )
        self._start(settings, given)

    def _start(self, settings: KafkaJournalSettings, given: Given) -> None:
        """Build the journal from its ``settings`` and what it was ``given``: the topic
        described (and refused when it compacts), the producer, the reader, the sagas held."""
        self._settings = settings
        self._topic = settings.topic
        self._ack_timeout = settings.ack_timeout_s
        self._monotonic = given.monotonic
        self._wall_clock = given.wall_clock
        # How long after sending an acknowledged event the hot path may publish unconfirmed,
        # and after which an acknowledgement must be confirmed by reading back.
        self._lease_soft_span = settings.lease_ttl_s - settings.lease_margin_s
        self._lease_hard_span = settings.lease_ttl_s - 1.0
        self.writer_id = writer_id_of(given.writer_id, given.writer_key)
        self._writer_key = given.writer_key
        self._writer_item = (attr.WRITER, self.writer_id)
        base: ClientConfig = {"bootstrap.servers": settings.bootstrap_servers, **settings.client}
        self._client_config = base
        info = described(base, settings)
        self.topic_info: TopicInfo = info
        self.identity = journal_identity(info.cluster_id, info.name, name=given.journal_name)
        """The journal's name in signed decisions: ``journal_name``, else
        ``kafka:<cluster id>/<topic>`` (docs/adr/0025-trust-model.md)."""
        producer_max = int(settings.client.get("message.max.bytes", PRODUCER_MAX_MESSAGE_BYTES))
        self.max_event_bytes = min(info.max_message_bytes, producer_max)
        """The largest event (key, value, headers and framing) the topic and producer take."""
        self._producer = journal_producer(base, self._ack_timeout, self.max_event_bytes)
        self._reader = SagaReader(
            base,
            self._topic,
            partitions=info.partitions,
            timeout=settings.read_timeout_s,
            index=given.index,
            keys=given.keys,
            writers=given.writers,
        )
        # With a key service, a saga opened here is written in chain form 2 with its data
        # sealed (docs/adr/0019-erasure.md); a saga keeps the form of its SAGA_OPENED.
        self._keys = given.keys
        self._reads = ReadCache(keys=given.keys)
        self._sagas = HeldSagas(
            reader=self._reader,
            monotonic=given.monotonic,
            lease_soft_span=self._lease_soft_span,
            lease_hard_span=self._lease_hard_span,
        )
        self._routes: dict[str, _Route] = {}
        self._fingerprint = fingerprint_header()
        self._closed = False
        self._deliveries = Deliveries(
            self._producer,
            ack_timeout=self._ack_timeout,
            on_lost=self._sagas.mark_poisoned,
            client=base,
        )

    @classmethod
    def from_settings(
        cls,
        settings: KafkaJournalSettings,
        *,
        writer_id: str | None = None,
        index: SagaIndex | None = None,
        keys: FieldSealer | None = None,
    ) -> KafkaJournal:
        """A journal configured by ``settings``, reading through ``index``.

        ``index`` is the read index ``settings.read_index`` names, built by the caller: this
        adapter does not import the Postgres one (``sagacity._env.kafka_journal`` builds both).
        With ``keys`` sealing its data there is no index (the archive does not keep sealed
        openings yet, so reads scan the topic).

        Raises:
            ConfigurationError: ``settings.read_index`` names an archive database but no index
                is given, or the writer key cannot be used.
        """
        named = settings.read_index
        if index is None and keys is None and named.enabled and named.database_url:
            raise ConfigurationError(
                "settings.read_index names an archive database but no index was given: pass "
                "index= (the Postgres read index), or set read_index.enabled=False"
            )
        writer_id = writer_id or settings.writer_id
        writer_key = None
        if settings.writer_key is not None:
            if not writer_id:
                raise ConfigurationError(
                    "SAGACITY_WRITER_KEY needs a stable writer id registered with the archive: "
                    "set SAGACITY_WRITER_ID"
                )
            try:
                writer_key = WriterKey.from_file(settings.writer_key, writer_id)
            except SigningKeyError as exc:
                raise ConfigurationError(f"SAGACITY_WRITER_KEY: {exc.message}") from exc
        return cls(
            settings.bootstrap_servers,
            topic=settings.topic,
            ack_timeout_s=settings.ack_timeout_s,
            startup_timeout_s=settings.startup_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            client=settings.client,
            writer_id=writer_id,
            lease_ttl_s=settings.lease_ttl_s,
            max_clock_skew_s=settings.max_clock_skew_s,
            index=index,
            writer_key=writer_key,
            keys=keys,
            journal_name=settings.journal_name,
            writers=(
                WriterRegistry.from_file(settings.writer_registry)
                if settings.writer_registry
                else None
            ),
        )

    # --- properties ------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        """The journal topic."""
        return self._topic

    @property
    def keys(self) -> FieldSealer | None:
        """The key service sealing and opening this journal's data (``None``: in clear)."""
        return self._keys

    @property
    def seals(self) -> bool:
        """Whether the sagas this journal opens are sealed (form 2 under a key service): what
        a tool with fields to redact needs (docs/adr/0019-erasure.md §5)."""
        return self._keys is not None

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
        state = self._sagas.state(draft.saga_id)
        with state.lock:
            sent = self._monotonic()
            if not (state.owned and not state.poisoned and sent < state.lease_soft):
                return self._append_confirmed(state, draft)
            entry, delivery = self._publish_owned(state, draft)
        if durable:
            deliveries = self._deliveries
            deliveries.wait(delivery)
            deliveries.check_earlier(state, delivery)
            self._sagas.renew(state, delivery, sent)
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
        state = self._sagas.state(draft.saga_id)
        with state.lock:
            sent = self._monotonic()
            if not (state.owned and not state.poisoned and sent < state.lease_soft):
                return self._append_confirmed(state, draft, after_seq=after_seq)
            tail = state.seq
            if tail != after_seq:
                raise tail_moved(draft.saga_id, after_seq, tail)
            entry, delivery = self._publish_owned(state, draft)
        if durable:
            deliveries = self._deliveries
            deliveries.wait(delivery)
            deliveries.check_earlier(state, delivery)
            self._sagas.renew(state, delivery, sent)
        return entry

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """:meth:`append` without blocking the event loop.

        The hot path publishes from the loop (a non-blocking call) and awaits the
        acknowledgement as a future; confirmed appends run in the default executor.
        """
        draft = self._prepare(draft)
        state = self._sagas.state(draft.saga_id)
        loop = asyncio.get_running_loop()
        if state.lock.acquire(blocking=False):
            try:
                sent = self._monotonic()
                fast = state.owned and not state.poisoned and sent < state.lease_soft
                if fast:
                    entry, delivery = self._publish_owned(state, draft)
            finally:
                state.lock.release()
            if fast:
                if durable:
                    deliveries = self._deliveries
                    await deliveries.wait_async(delivery, loop)
                    for earlier in earlier_unsettled(state, delivery):
                        if not earlier.done:
                            await deliveries.settled_async(earlier, loop)
                    deliveries.check_earlier(state, delivery, waited=True)
                    if self._monotonic() >= state.lease_hard:
                        await loop.run_in_executor(None, self._sagas.renew, state, delivery, sent)
                    else:
                        self._sagas.extend_lease(state, sent)
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
        self._deliveries.raise_failures()
        if remaining:
            raise JournalUnavailableError(
                f"{remaining} journal event(s) not acknowledged by Kafka within {limit:.1f}s"
            )

    # --- reading ---------------------------------------------------------------------------
    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's accepted chain in seq order (empty when unknown), read from its partition
        (continuing this journal's last read of it, or from the read index).

        A saga this journal holds is read once the events it published are acknowledged: the
        writer keeps only the saga's head, never its chain.

        Raises:
            JournalUnavailableError: pending events failed, or the topic could not be read.
        """
        state = self._sagas.get(saga_id)
        if state is not None:
            with state.lock:
                pending = list(state.pending) if state.owned and not state.poisoned else []
            for delivery in pending:
                self._deliveries.wait(delivery)
        return tuple(self.read(saga_id).entries)

    def read(self, saga_id: str) -> SagaRead:
        """The saga as on the topic: accepted chain, tail, forks and skipped messages.

        A saga read recently is continued from where that read stopped rather than read again.

        Raises:
            JournalUnavailableError: the topic could not be read.
        """
        self._check_open()
        return self._read_latest(saga_id)

    def traceparent_of(self, saga_id: str, seq: int) -> str | None:
        """The W3C ``traceparent`` header of the saga's accepted event at ``seq`` (``None``:
        none, or the event is no longer on the topic).  For tracing only: a decision's span
        continues its request's trace; nothing is decided from it.

        Raises:
            JournalUnavailableError: the topic could not be read.
        """
        offset = self.read(saga_id).accepted_offset(seq)
        if offset is None:
            return None
        return header_traceparent(self._reader.headers_at(saga_id, offset))

    def forget(self, saga_id: str) -> None:
        """Drop what this journal keeps of the saga's opened data — its kept read and its data
        key — so its next read opens it through the key service again (after an erasure it
        reads as erased): called when the saga's ``ERASED`` is seen
        (docs/operations/erasure.md)."""
        self._reads.forget(saga_id)
        forget_key = getattr(self._keys, "forget", None)
        if forget_key is not None:
            forget_key(saga_id)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Open approval requests, derived from the chains on the topic.

        Without ``saga_id`` every partition is scanned, or, with a read index, the sagas the
        archive names and each partition past the archiver's offset (the approvals service
        keeps its own materialised view instead).

        Raises:
            JournalUnavailableError: the topic could not be read.
        """
        from sagacity.gate._requests import pending_requests

        if saga_id is not None:
            return list(pending_requests(self.entries(saga_id)))
        self.flush()
        out: list[ApprovalRequest] = []
        for partition in range(self._reader.partitions):
            for read in self._reader.read_for_requests(partition):
                out.extend(pending_requests(read.entries))
        return sorted(out, key=lambda r: (r.saga_id, r.seq))

    # --- writer lease (docs/adr/0011-writer-lease.md) ----------------------------------------
    def lease(self, saga_id: str) -> LeaseView:
        """The lease of a live saga's writer, judged on this journal's wall clock.

        Raises:
            SagaNotLiveError: no writer holds the saga (unknown, handed off or ended).
            JournalUnavailableError: the topic could not be read.
        """
        return self._lease(self.read(saga_id))

    def _lease(self, read: SagaRead) -> LeaseView:
        return judge_lease(
            read,
            config=self._client_config,
            topic=self._topic,
            read_timeout_s=self._settings.read_timeout_s,
            now_s=self._wall_clock(),
            max_clock_skew_s=self._settings.max_clock_skew_s,
        )

    def take_over(
        self, saga_id: str, *, reason: str, force: bool = False, actor: str | None = None
    ) -> Takeover:
        """Take a live saga from a writer presumed gone and hand it to compensation.

        Allowed when the broker timestamp of the saga's last accepted event is older than the
        writer's recorded lease plus ``max_clock_skew_s`` (on this journal's wall clock), or
        with ``force``.  Journals ``COMPENSATION_REQUESTED`` (``handoff=takeover``,
        ``abandoned_writer``, ``ref_seq`` = the ``SAGA_OPENED``) with a compare-and-append on
        the tail that was judged: if the writer (or another taker) appended meanwhile, nothing
        is appended.

        Raises:
            SagaNotLiveError: no writer holds the saga.
            LeaseHeldError: the lease has not expired (or none was recorded) and not ``force``.
            TailMovedError: the chain moved while taking over (the writer is alive, or another
                taker won); nothing of this call is in the chain.
            SerializationError: ``reason`` is empty or not text.
            JournalUnavailableError: the topic could not be read or written.
        """
        if not isinstance(reason, str) or not reason.strip():
            raise SerializationError("a takeover needs a reason (non-empty text)")
        read = self.read(saga_id)
        view = self._lease(read)
        if not view.expired and not force:
            raise lease_held(saga_id, view, self._settings.max_clock_skew_s)
        draft = takeover_draft(
            read,
            view,
            reason=reason,
            actor=actor or self.writer_id,
            recorded_at_us=int(self._wall_clock() * 1_000_000),
        )
        draft = self._prepare(draft)
        state = self._sagas.state(saga_id)
        with state.lock:
            entry = self._append_confirmed(
                state, draft, after_seq=view.last_seq, takeover_from=view.writer
            )
        return Takeover(entry=entry, lease=view, forced=not view.expired)

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
            self._deliveries.stop()
            self._reader.close()

    def __enter__(self) -> KafkaJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _read_latest(self, saga_id: str, *, until_offset: int | None = None) -> SagaRead:
        """Read the saga, continuing the last read of it this journal made, and remember it."""
        read = self._reader.read(
            saga_id, resume=self._reads.get(saga_id), until_offset=until_offset
        )
        self._reads.put(read)
        return read

    def _check_open(self) -> None:
        if self._closed:
            raise JournalUnavailableError(f"the Kafka journal on {self._topic!r} is closed")

    def _prepare(self, draft: EntryDraft) -> EntryDraft:
        self._check_open()
        check_json_payload(draft)
        # Every event names the writer that produced it (hashed into the chain): added by the
        # link step (_writer_attribute), not by a copy of the draft here.
        if draft.event_type is EventType.SAGA_OPENED:
            if draft.actor is None:
                draft = dataclasses.replace(draft, actor=self.writer_id)
            if attr.LEASE_TTL_S not in draft.attributes:
                lease = {attr.LEASE_TTL_S: f"{self._settings.lease_ttl_s:g}"}
                draft = dataclasses.replace(draft, attributes={**draft.attributes, **lease})
        return draft

    def _writer_attribute(self, draft: EntryDraft) -> tuple[str, str] | None:
        """The ``writer`` attribute the link step adds to ``draft`` (``None``: it has it)."""
        if draft.attributes.get(attr.WRITER) == self.writer_id:
            return None
        return self._writer_item

    def _route(self, saga_id: str) -> _Route:
        """The saga's message key, partition, ``saga_id`` header, and the bytes its key and the
        headers every event has take (with the record's framing); made once per saga."""
        route = self._routes.get(saga_id)
        if route is None:
            key = saga_id.encode("utf-8")
            header = ("saga_id", key)
            fingerprint = self._fingerprint
            fixed = (
                len(key)
                + RECORD_OVERHEAD
                + len(header[0])
                + len(key)
                + len(fingerprint[0])
                + len(fingerprint[1])
            )
            route = (key, self._reader.partition_of(saga_id), header, fixed)
            if len(self._routes) >= _ROUTE_CACHE:
                self._routes.clear()
            self._routes[saga_id] = route
        return route

    def _extra_headers(self, entry: JournalEntry) -> list[tuple[str, bytes]] | None:
        """The headers beyond the three every event has: its trace context, its writer's
        signature (``None``: neither)."""
        extra: list[tuple[str, bytes]] | None = None
        traceparent = current_traceparent.get()
        if traceparent is not None:
            traceparent = valid_traceparent(traceparent)
            if traceparent is not None:
                extra = [("traceparent", traceparent.encode())]
        writer_key = self._writer_key
        if writer_key is not None:
            signature = (
                WRITER_HEADER,
                writer_key.sign(saga_id=entry.saga_id, seq=entry.seq, hash=entry.hash),
            )
            if extra is None:
                extra = [signature]
            else:
                extra.append(signature)
        return extra

    def _produce(self, entry: JournalEntry, value: bytes | None = None) -> Delivery:
        """Publish ``entry`` (size-checked first); the caller holds the saga's lock.

        ``value`` is ``entry``'s encoding when the caller made it already.
        """
        key, partition, saga_header, size = self._route(entry.saga_id)
        if value is None:
            value = encode_entry(entry)
        type_header, type_size = EVENT_TYPE_HEADERS.get(entry.event_type) or type_header_of(
            entry.event_type.value  # an unknown type relayed as is
        )
        headers: list[tuple[str, str | bytes | None]] = [
            type_header,
            saga_header,
            self._fingerprint,
        ]
        size += len(value) + type_size
        # Most events have neither a writer's signature nor a trace context: no call for them.
        if self._writer_key is not None or current_traceparent.get() is not None:
            extra = self._extra_headers(entry)
            if extra is not None:
                headers += extra
                for header_name, header in extra:
                    size += len(header_name) + len(header)
        if size > self.max_event_bytes:
            raise EventTooLargeError(
                f"the {entry.event_type.value} event of saga {entry.saga_id!r} is {size} bytes; "
                f"topic {self._topic!r} and the producer accept at most {self.max_event_bytes}. "
                "Nothing was written (for an INTENT, the tool was not called)",
                size=size,
                limit=self.max_event_bytes,
                saga_id=entry.saga_id,
            )
        delivery = Delivery(entry, self._deliveries)
        deadline: float | None = None
        while True:
            try:
                self._producer.produce(
                    self._topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=delivery.settle,
                )
                return delivery
            except BufferError as exc:
                # The local queue is full: the poll thread drains it as acknowledgements come.
                if deadline is None:
                    deadline = time.monotonic() + self._ack_timeout
                if time.monotonic() > deadline:
                    raise JournalUnavailableError(
                        "the producer's queue stayed full: Kafka is not acknowledging",
                        saga_id=entry.saga_id,
                        seq=entry.seq,
                    ) from exc
                time.sleep(0.005)
            except KafkaException as exc:
                raise self._deliveries.refused_now(exc, entry) or JournalUnavailableError(
                    f"Kafka refused the event: {exc}", saga_id=entry.saga_id, seq=entry.seq
                ) from exc

    def _publish_owned(self, state: SagaState, draft: EntryDraft) -> tuple[JournalEntry, Delivery]:
        writer = self._writer_attribute(draft)
        if self._keys is not None and state.form == 2:
            entry, value = link_encoded_sealed(
                draft, seq=state.seq + 1, prev_hash=state.hash, keys=self._keys, attribute=writer
            )
        else:
            refuse_in_form_1(draft)
            entry, value = link_encoded(
                draft, seq=state.seq + 1, prev_hash=state.hash, attribute=writer
            )
        delivery = self._produce(entry, value)
        # The head moves on; the entry itself is held only until acknowledged (its delivery).
        state.seq = entry.seq
        state.hash = entry.hash
        # Until acknowledged (refused ones stay, for the durable append that reports them).
        delivery.track(state.pending)
        if entry.event_type in HANDOFF_EVENTS:
            self._sagas.release(draft.saga_id, state)
        return entry, delivery

    def _append_confirmed(
        self,
        state: SagaState,
        draft: EntryDraft,
        *,
        after_seq: int | None = None,
        takeover_from: str | None = None,
    ) -> JournalEntry:
        """Append by reading the tail, publishing durably and confirming; holds the lock.

        ``takeover_from``: the live writer this append may take the saga from (a takeover).
        """
        saga_id = draft.saga_id
        writer = self._writer_attribute(draft)
        if writer is not None:
            draft = with_attribute(draft, *writer)
        for delivery in state.pending.copy():  # acknowledged ones leave it meanwhile
            # Let earlier events settle so the tail read below is final.
            delivery.wait(self._ack_timeout + 0.5)
        state.pending = []
        current = self._read_latest(saga_id)
        owner = current.ownership
        mine = self._sagas.admit(
            state, current, owner, writer_id=self.writer_id, takeover_from=takeover_from
        )
        seq, prev = current.tail
        if after_seq is not None and seq != after_seq:
            raise tail_moved(saga_id, after_seq, seq)
        value = None
        if self._keys is not None and (
            current.entries[-1].form == 2 if current.entries else seq == 0
        ):
            if seq == 0:
                # The saga's data key is made as it opens, not on its first tool call
                # (docs/adr/0019-erasure.md, Consequences).
                self._keys.prepare(saga_id)
            entry, value = link_encoded_sealed(draft, seq=seq + 1, prev_hash=prev, keys=self._keys)
        else:
            refuse_in_form_1(draft)
            entry = link(draft, seq=seq + 1, prev_hash=prev)
        sent = self._monotonic()
        delivery = self._produce(entry, value)
        self._deliveries.wait(delivery)
        # Only what was published since the read above: from where it stopped to our offset.
        confirm = self._reader.read(saga_id, resume=current, until_offset=delivery.offset)
        self._reads.put(confirm)
        at = entry.seq - confirm.base_seq - 1
        winner = confirm.entries[at] if 0 <= at < len(confirm.entries) else None
        # An event sent again after its acknowledgement was lost (a broker fault) can find its
        # own first copy accepted at its seq: the same content (the hash covers it all, the
        # writer attribute included) from this writer is this append, confirmed.
        own_copy = (
            winner is not None
            and winner.hash == entry.hash
            and winner.attributes.get(attr.WRITER) == self.writer_id
        )
        if confirm.accepted_offset(entry.seq) != delivery.offset and not own_copy:
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
        self._sagas.confirmed(
            state, entry, head=confirm.entries[-1], owner=owner, mine=mine, sent=sent
        )
        return entry
