"""The compensation service: a consumer group on the journal topic that finishes sagas.

On each ``COMPENSATION_REQUESTED`` for a saga whose compensation is not finished, a worker reads
the saga's chain, refuses it if it does not verify (dead-letter), takes the saga's lock in
Postgres, and runs the core's compensation (``Sagacity.compensate``) with the claiming invoker,
journaling through the Kafka journal.  Offsets are committed only once the work of every earlier
message of the partition is done (``enable.auto.commit=false``).  See
docs/adr/0007-compensation-exactly-once.md.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from pydantic import Field

from sagacity import _attributes as attr
from sagacity._compensation import CompensationCall
from sagacity._events import EntryDraft, EventType, JournalEntry
from sagacity._result import SagaResult, SagaStatus
from sagacity._saga import Sagacity
from sagacity._settings import SagacitySettings
from sagacity._writer_signature import WriterKey
from sagacity.chain import verify
from sagacity.consumers._tools import register_tools
from sagacity.consumers.compensation import _failpoints
from sagacity.consumers.compensation._deadletter import DeadLetters, ensure_topic
from sagacity.consumers.compensation._invoker import ClaimingInvoker
from sagacity.consumers.compensation._journal import Revoked, ServiceJournal
from sagacity.consumers.compensation._metrics import HealthServer, Metrics
from sagacity.errors import (
    ChainIntegrityError,
    CompensationConflictError,
    DeclarationError,
    JournalError,
    PersistenceError,
    SerializationError,
    ToolLoadError,
)
from sagacity.ports import Claim, ClaimStatus
from sagacity.postgres import PostgresClaimStore
from sagacity.producer import ForkKind, KafkaJournal, ReadIndexSettings, SagaRead
from sagacity.producer._clients import with_logger
from sagacity.schemas import decode_entry

log = logging.getLogger("sagacity.compensation")

WRITER_PREFIX = "sagacity-compensation/"
"""Every instance's writer id starts with it (the claim protocol is in force for its events)."""

_FINAL = frozenset(s.value for s in SagaStatus if s is not SagaStatus.COMPENSATION_PENDING)
_REASONS = frozenset(
    {
        EventType.FAILED,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.SUSPECT_SETTLED,
    }
)


class CompensationSettings(SagacitySettings):
    """How the service runs: each setting ``x`` from ``SAGACITY_COMPENSATION_X``, then
    ``SAGACITY_X`` (pydantic-settings; keywords win; the CLI passes its options).

    Attributes:
        bootstrap_servers / topic: the journal.
        database_url: Postgres for claims and saga locks.
        tools: ``package.module:attr`` targets naming the tools and their compensations.
        group_id: the consumer group every instance joins.
        instance_id: a stable id per replica (static membership: a restarted replica takes its
            partitions back without waiting for the session timeout); ``None``: dynamic.
        compensation_timeout_s: the longest one undo call may run.
        concurrency: sagas compensated at once.
        handoff_grace_s: how long to wait for the requesting run's ``SAGA_ENDED`` after its
            ``COMPENSATION_REQUESTED`` (so the two writers never race for the same seq).
        http_host / http_port: where ``/healthz``, ``/readyz`` and ``/metrics`` are served
            (``None``: not served).
        dlq_topic: the dead-letter topic (default ``<topic>.dlq``).
        client: extra librdkafka settings (TLS/SASL, ``fetch.wait.max.ms`` …).
        session_timeout_ms: the consumer group session timeout.
        read_index: where reads find sagas' archived prefixes; by default the archive in
            ``database_url`` (docs/adr/0010-saga-read-index.md).
    """

    env_service: ClassVar[str] = "COMPENSATION"
    env_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "group_id": ("GROUP",),
        "compensation_timeout_s": ("TIMEOUT_S",),
        "http_port": ("PORT",),
        "http_host": ("HOST",),
    }
    env_excluded: ClassVar[frozenset[str]] = frozenset({"client", "read_index"})

    bootstrap_servers: str = Field(min_length=1)
    database_url: str = Field(min_length=1)
    tools: tuple[str, ...] = ()
    topic: str = "sagacity.journal"
    group_id: str = "sagacity-compensation"
    instance_id: str | None = None
    compensation_timeout_s: float = Field(default=30.0, gt=0)
    concurrency: int = Field(default=4, ge=1, le=256)
    handoff_grace_s: float = Field(default=5.0, ge=0)
    http_host: str = "127.0.0.1"
    http_port: int | None = Field(default=None, ge=0, le=65535)
    dlq_topic: str | None = None
    client: Mapping[str, str] = Field(default_factory=dict)
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    read_index: ReadIndexSettings | None = None
    writer_key: str | None = None
    approvals_public_key: str | None = None
    """The pinned approvals key(s) (``SAGACITY_APPROVALS_PUBLIC_KEY``): a ``SUSPECT_SETTLED``
    is acted on only when it verifies; without one, no settlement is acted on."""
    """The service's writer signing key file (``SAGACITY_COMPENSATION_WRITER_KEY`` or
    ``SAGACITY_WRITER_KEY``), registered with the archive under ``sagacity-compensation/<group>``;
    ``None``: unsigned (docs/adr/0014-signed-decisions-and-writers.md)."""


@dataclass
class _Partition:
    """Offsets of one assigned partition: which are done, and what may be committed."""

    number: int
    pending: OrderedDict[int, bool] = field(default_factory=OrderedDict)
    jobs: set[concurrent.futures.Future[None]] = field(default_factory=set)
    commit_at: int | None = None
    committed: int | None = None
    revoking: bool = False

    def add(self, offset: int) -> None:
        self.pending[offset] = False

    def done(self, offset: int) -> None:
        if offset in self.pending:
            self.pending[offset] = True
        while self.pending:
            first, finished = next(iter(self.pending.items()))
            if not finished:
                break
            self.pending.popitem(last=False)
            self.commit_at = first + 1


@dataclass(frozen=True, kw_only=True)
class _Work:
    message: Message
    entry: JournalEntry
    partition: _Partition
    deadline: float

    @property
    def offset(self) -> int:
        offset = self.message.offset()
        return -1 if offset is None else offset


def pending_request(entries: Sequence[JournalEntry]) -> JournalEntry | None:
    """The saga's last ``COMPENSATION_REQUESTED`` if no final ``SAGA_ENDED`` followed it."""
    request: JournalEntry | None = None
    for entry in entries:
        if entry.event_type is EventType.COMPENSATION_REQUESTED:
            request = entry
        elif (
            request is not None
            and entry.event_type is EventType.SAGA_ENDED
            and entry.result in _FINAL
        ):
            request = None
    return request


def _reason(request: JournalEntry) -> EventType:
    try:
        reason = EventType(request.attributes.get(attr.REASON, EventType.FAILED.value))
    except ValueError:
        return EventType.FAILED
    return reason if reason in _REASONS else EventType.FAILED


class _Poison(Exception):  # noqa: N818 - a flow signal inside the service
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class CompensationService:
    """Runs the compensation consumer until :meth:`stop` (SIGTERM) is called.

    Args:
        settings: see :class:`CompensationSettings`.
        register: registers further tools on each ``Sagacity`` the service makes (the tools
            of an upstream MCP server, declared by a tool policy); with it ``settings.tools``
            may be empty.

    Raises:
        ToolLoadError: a ``--tools`` target cannot be imported, or no tool is given (raised
            here, at start).
    """

    def __init__(
        self,
        settings: CompensationSettings,
        *,
        register: Callable[[Sagacity], None] | None = None,
    ) -> None:
        self.settings = settings
        self._register = register
        self.instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.writer_id = f"{WRITER_PREFIX}{self.instance}/{uuid.uuid4().hex[:8]}"
        self.metrics = Metrics()
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._parts: dict[int, _Partition] = {}
        self._completions: queue.SimpleQueue[tuple[_Partition, int, bool]] = queue.SimpleQueue()
        self._saga_locks: dict[str, threading.Lock] = {}
        self._joined = False
        self._awaiting: dict[str, _Work] = {}
        self._last_loop = time.monotonic()
        self._first_call: dict[str, int] = {}
        self._kafka: KafkaJournal | None = None
        self._journals: list[KafkaJournal] = []
        self._local = threading.local()
        self._journal: ServiceJournal | None = None
        self._writer_key = (
            WriterKey.from_file(settings.writer_key, f"{WRITER_PREFIX}{settings.group_id}")
            if settings.writer_key
            else None
        )
        # Tools first: an un-importable target must fail before anything connects.
        self._sagacity = Sagacity(compensation="delegated", writer_id=self.writer_id)
        self.tool_names = self._register_tools(self._sagacity)
        self._claims = PostgresClaimStore(settings.database_url, instance=self.instance)
        self._invoker = ClaimingInvoker(
            self._claims,
            timeout_s=settings.compensation_timeout_s,
            on_call=self._called,
            on_start=self._starting,
        )
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="compensation"
        )
        self._consumer: Consumer | None = None
        self._dead: DeadLetters | None = None
        self._http: HealthServer | None = None

    def _register_tools(self, sagacity: Sagacity) -> tuple[str, ...]:
        if self.settings.tools or self._register is None:
            register_tools(sagacity, self.settings.tools)
        if self._register is not None:
            try:
                self._register(sagacity)
            except DeclarationError as exc:
                raise ToolLoadError(exc.message) from exc
        return sagacity.registry.names()

    # --- lifecycle -----------------------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        """The port ``/metrics`` is served on, once started."""
        return self._http.port if self._http is not None else None

    def stop(self) -> None:
        """Ask the service to stop: the step in flight finishes, then :meth:`run` returns."""
        self._stopping.set()

    def _base_config(self) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": self.settings.bootstrap_servers, **self.settings.client}

    def start(self) -> None:
        """Connect to Postgres and Kafka and join the group (called by :meth:`run`).

        Raises:
            PersistenceError / JournalError / ConfigurationError: a dependency is unusable.
        """
        s = self.settings
        self._claims.ensure_schema()
        self._kafka = self._new_journal()
        self._journal = ServiceJournal(self._thread_journal, may_write=self._may_write)
        self._sagacity = Sagacity(
            journal=self._journal,
            compensation="delegated",
            writer_id=self.writer_id,
            # A SUSPECT_SETTLED counts only when the approvals service signed it (ADR 0014).
            approvals_public_key=s.approvals_public_key,
        )
        self._register_tools(self._sagacity)
        dlq = s.dlq_topic or f"{s.topic}.dlq"
        ensure_topic(AdminClient(with_logger(self._base_config())), dlq, partitions=1, timeout=15)
        self._dead = DeadLetters(self._base_config(), dlq)
        config: dict[str, str | int | float | bool] = {
            "fetch.wait.max.ms": 50,
            "fetch.min.bytes": 1,
            **self._base_config(),
            "group.id": s.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": max(500, s.session_timeout_ms // 5),
            "max.poll.interval.ms": max(300_000, int(s.compensation_timeout_s * 4000)),
        }
        if s.instance_id:
            config["group.instance.id"] = s.instance_id
        self._consumer = Consumer(with_logger(config))
        self._consumer.subscribe(
            [s.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        if s.http_port is not None:
            self._http = HealthServer(
                s.http_host,
                s.http_port,
                metrics=self.metrics,
                healthy=self._healthy,
                ready=self._ready,
            )
            self._http.start()
        log.info(
            "compensation service started",
            extra={"instance": self.instance, "reason": ",".join(self.tool_names)},
        )

    def _new_journal(self) -> KafkaJournal:
        s = self.settings
        index = s.read_index or ReadIndexSettings(database_url=s.database_url)
        if index.database_url is None:
            index = index.model_copy(update={"database_url": s.database_url})
        journal = KafkaJournal(
            s.bootstrap_servers,
            topic=s.topic,
            client=dict(s.client),
            writer_id=f"{WRITER_PREFIX}{s.group_id}",
            index=index.build(),
            writer_key=self._writer_key,
        )
        with self._lock:
            self._journals.append(journal)
        return journal

    def _thread_journal(self) -> KafkaJournal:
        """This worker thread's journal: each has its own reader, so reads run in parallel."""
        journal: KafkaJournal | None = getattr(self._local, "journal", None)
        if journal is None:
            journal = self._new_journal()
            self._local.journal = journal
        return journal

    def _drop_thread_journal(self) -> None:
        journal: KafkaJournal | None = getattr(self._local, "journal", None)
        self._local.journal = None
        if journal is None:
            return
        with self._lock:
            if journal in self._journals:
                self._journals.remove(journal)
        with contextlib.suppress(Exception):
            journal.close()

    def run(self) -> None:
        """Start, then consume until :meth:`stop`; finishes the steps in flight and returns."""
        self.start()
        assert self._consumer is not None
        consumer = self._consumer
        next_lag = 0.0
        paused = False
        try:
            while not self._stopping.is_set():
                self._last_loop = time.monotonic()
                self._drain()
                self._submit_expired()
                busy = self._in_flight() >= self.settings.concurrency * 8
                if busy != paused:
                    assignment = consumer.assignment()
                    (consumer.pause if busy else consumer.resume)(assignment)
                    paused = busy
                message = consumer.poll(0.1)
                if time.monotonic() >= next_lag:
                    self._commit(asynchronous=True)
                    self._update_lag()
                    next_lag = time.monotonic() + 1.0
                if message is None:
                    continue
                self._handle(message)
                self._commit(asynchronous=True)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            jobs = [job for part in self._parts.values() for job in part.jobs]
        concurrent.futures.wait(jobs)
        self._drain()
        consumer = self._consumer
        if consumer is not None:
            with contextlib.suppress(KafkaException):
                self._commit(asynchronous=False)
            consumer.close()
        self._executor.shutdown(wait=True)
        for closer in (self._dead, *self._journals, self._claims, self._http):
            if closer is not None:
                with contextlib.suppress(Exception):
                    if isinstance(closer, HealthServer):
                        closer.stop()
                    else:
                        closer.close()
        log.info("compensation service stopped", extra={"instance": self.instance})

    # --- health --------------------------------------------------------------------------
    def _healthy(self) -> tuple[bool, str]:
        idle = time.monotonic() - self._last_loop
        if idle > 30:
            return False, f"consumer loop stalled for {idle:.0f}s"
        return True, "ok"

    def _ready(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "stopping"
        if not self._joined:
            return False, "not yet a member of the consumer group"
        if not self._claims.ping():
            return False, "claims database does not answer"
        return True, "ready"

    # --- rebalance -----------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        del consumer
        with self._lock:
            for tp in partitions:
                self._parts[tp.partition] = _Partition(number=tp.partition)
            self._joined = True
        log.info("assigned partitions %s", sorted(tp.partition for tp in partitions))

    def _release(self, partitions: list[TopicPartition], *, commit: bool) -> None:
        numbers = {tp.partition for tp in partitions}
        for saga, work in list(self._awaiting.items()):
            if work.partition.number in numbers:
                del self._awaiting[saga]  # uncommitted: the next owner sees it again
        with self._lock:
            parts = [self._parts[n] for n in numbers if n in self._parts]
            for part in parts:
                part.revoking = True
            jobs = [job for part in parts for job in part.jobs]
        # Jobs stop before their next step; the step in flight finishes and is journaled.
        concurrent.futures.wait(jobs)
        self._drain()
        if commit:
            with contextlib.suppress(KafkaException):
                self._commit(asynchronous=False, only=numbers)
        with self._lock:
            for n in numbers:
                self._parts.pop(n, None)
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(str(n))  # another instance reports it now

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        del consumer
        log.info("revoking partitions %s", sorted(tp.partition for tp in partitions))
        self._release(partitions, commit=True)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        del consumer
        log.warning("lost partitions %s", sorted(tp.partition for tp in partitions))
        self._release(partitions, commit=False)

    def _may_write(self, saga_id: str) -> bool:
        if self._stopping.is_set() or self._kafka is None:
            return False
        number = self._kafka.reader.partition_of(saga_id)
        with self._lock:
            part = self._parts.get(number)
            return part is not None and not part.revoking

    # --- offsets -------------------------------------------------------------------------
    def _in_flight(self) -> int:
        with self._lock:
            return sum(len(p.jobs) for p in self._parts.values())

    def _drain(self) -> None:
        while True:
            try:
                part, offset, finished = self._completions.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                if self._parts.get(part.number) is not part:
                    continue
                if finished:
                    part.done(offset)

    def _commit(self, *, asynchronous: bool, only: set[int] | None = None) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        offsets: list[TopicPartition] = []
        with self._lock:
            for part in self._parts.values():
                if only is not None and part.number not in only:
                    continue
                if part.commit_at is not None and part.commit_at != part.committed:
                    offsets.append(TopicPartition(self.settings.topic, part.number, part.commit_at))
                    part.committed = part.commit_at
        if not offsets:
            return
        if asynchronous:
            consumer.commit(offsets=offsets, asynchronous=True)
        else:
            consumer.commit(offsets=offsets, asynchronous=False)

    def _update_lag(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            tp = TopicPartition(self.settings.topic, part.number)
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            done = part.commit_at if part.commit_at is not None else part.committed
            if done is None:
                position = consumer.position([tp])[0].offset
                done = position if position is not None and position >= 0 else 0
            self.metrics.lag.labels(partition=str(part.number)).set(max(0, high - done))

    # --- messages ------------------------------------------------------------------------
    def _handle(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", error)
            return
        number = message.partition()
        offset = message.offset()
        if number is None or offset is None:
            return
        with self._lock:
            part = self._parts.get(number)
            if part is None or part.revoking:
                return
            part.add(offset)
        try:
            entry = decode_entry(message.value() or b"")
        except SerializationError as exc:
            self._dead_letter_now(message, part, "undecodable", exc.message)
            return
        if entry.event_type is EventType.COMPENSATION_REQUESTED:
            work = _Work(
                message=message,
                entry=entry,
                partition=part,
                deadline=time.monotonic() + self.settings.handoff_grace_s,
            )
            # Act once the requesting run's SAGA_ENDED follows (its message comes next), so
            # that run never loses the race for its last seq; or when the grace runs out.
            replaced = self._awaiting.pop(entry.saga_id, None)
            if replaced is not None:
                self._completions.put((replaced.partition, replaced.offset, True))
            self._awaiting[entry.saga_id] = work
        elif entry.event_type is EventType.SAGA_ENDED:
            waiting = self._awaiting.get(entry.saga_id)
            if waiting is not None and entry.result == SagaStatus.COMPENSATION_PENDING.value:
                self._submit(self._awaiting.pop(entry.saga_id))
        if entry.event_type is not EventType.COMPENSATION_REQUESTED:
            self._completions.put((part, offset, True))

    def _submit_expired(self) -> None:
        now = time.monotonic()
        for saga, work in list(self._awaiting.items()):
            if work.deadline <= now:
                del self._awaiting[saga]
                self._submit(work)

    def _submit(self, work: _Work) -> None:
        part = work.partition
        with self._lock:
            if self._parts.get(part.number) is not part or part.revoking:
                return
            self.metrics.in_flight.inc()
            # Registered before the job can finish, so its completion always finds it.
            job = self._executor.submit(self._job, work)
            part.jobs.add(job)
        job.add_done_callback(lambda f: self._finished(work, f))

    def _dead_letter_now(
        self, message: Message, part: _Partition, reason: str, detail: str
    ) -> None:
        assert self._dead is not None
        offset = message.offset() or 0
        while not self._stopping.is_set():
            try:
                self._dead.send(message, reason=reason, detail=detail)
            except JournalError as exc:
                log.error("dead-letter publication failed, retrying: %s", exc)
                time.sleep(1.0)
                continue
            self.metrics.dead_letters.labels(reason=reason).inc()
            self._completions.put((part, offset, True))
            return

    def _finished(self, work: _Work, future: concurrent.futures.Future[None]) -> None:
        self.metrics.in_flight.dec()
        with self._lock:
            work.partition.jobs.discard(future)
        error = future.exception()
        finished = error is None
        if error is not None and not isinstance(error, Revoked):
            log.error(
                "compensation job failed: %s",
                error,
                extra={"saga_id": work.entry.saga_id, "offset": work.offset},
            )
        self._completions.put((work.partition, work.offset, finished))

    # --- one saga ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _saga_lock(self, saga_id: str) -> Iterator[None]:
        with self._lock:
            lock = self._saga_locks.setdefault(saga_id, threading.Lock())
        with lock:
            try:
                yield
            finally:
                with self._lock:
                    self._saga_locks.pop(saga_id, None)

    def _guard(self, saga_id: str) -> None:
        if not self._may_write(saga_id):
            raise Revoked(f"no longer the owner of saga {saga_id!r}")

    def _job(self, work: _Work) -> None:
        saga = work.entry.saga_id
        delay = 0.1
        with self._saga_lock(saga):
            while True:
                self._guard(saga)
                try:
                    self._compensate(work)
                    return
                except _Poison as poison:
                    self._dead_letter_job(work, poison)
                    return
                except Revoked:
                    raise
                except (JournalError, PersistenceError, CompensationConflictError) as exc:
                    # Transient (broker, database, a racing writer): read the chain again.
                    log.warning(
                        "compensation interrupted, retrying: %s", exc, extra={"saga_id": saga}
                    )
                except Exception:
                    # Unexpected: keep the offset uncommitted and try again rather than stall
                    # the partition's commits behind a job that will never finish.
                    log.exception(
                        "compensation failed unexpectedly, retrying", extra={"saga_id": saga}
                    )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _dead_letter_job(self, work: _Work, poison: _Poison) -> None:
        assert self._dead is not None
        while True:
            self._guard(work.entry.saga_id)
            try:
                self._dead.send(work.message, reason=poison.reason, detail=poison.detail)
            except JournalError as exc:
                log.error("dead-letter publication failed, retrying: %s", exc)
                time.sleep(1.0)
                continue
            self.metrics.dead_letters.labels(reason=poison.reason).inc()
            return

    def _read(self, work: _Work) -> SagaRead:
        """The saga's chain, refused (``_Poison``) unless the request is on it and it verifies."""
        read = self._thread_journal().read(work.entry.saga_id)
        for rejected in read.rejected:
            if rejected.kind in (ForkKind.EDITED, ForkKind.FOREIGN):
                raise _Poison(
                    "chain_does_not_verify",
                    f"saga {read.saga_id!r}: {rejected.kind.value} event at offset "
                    f"{rejected.offset} (seq {rejected.entry.seq}): {rejected.detail}",
                )
        if read.accepted_offset(work.entry.seq) != work.offset:
            mine = [r for r in read.rejected if r.offset == work.offset]
            if mine and mine[0].kind is ForkKind.DUPLICATE:
                raise _Duplicate
            accepted = read.accepted_offset(work.entry.seq)
            index = work.entry.seq - read.base_seq - 1
            if (
                not mine
                and accepted is not None
                and accepted < work.offset
                and read.entries[index].hash == work.entry.hash
            ):
                # A redelivered copy the archive (the read index) did not keep: a duplicate.
                raise _Duplicate
            detail = mine[0].detail if mine else "not found on the saga's chain"
            raise _Poison(
                "not_on_chain",
                f"saga {read.saga_id!r}: COMPENSATION_REQUESTED at offset {work.offset} is not "
                f"part of the accepted chain: {detail}",
            )
        verdict = verify(
            read.entries, saga_id=read.saga_id, after_seq=read.base_seq, after_hash=read.base_hash
        )
        if not verdict.ok:
            raise _Poison(
                "chain_does_not_verify",
                f"saga {read.saga_id!r} does not verify at seq {verdict.bad_seq}: "
                f"{verdict.reason}: {verdict.detail}",
            )
        return read

    def _compensate(self, work: _Work) -> None:
        saga = work.entry.saga_id
        while not self._claims.try_lock_saga(saga):
            # Another instance is compensating it (a rebalance in progress): wait for it.
            self._guard(saga)
            time.sleep(0.05)
        try:
            try:
                read = self._read(work)
            except _Duplicate:
                return
            # Normally the requesting run's SAGA_ENDED is on the chain already (the consumer
            # waits for its message); when that run died before writing it, wait out the grace
            # so a late SAGA_ENDED cannot lose the race for its seq.
            deadline = work.deadline
            while (
                read.entries[-1].event_type is EventType.COMPENSATION_REQUESTED
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
                self._guard(saga)
                read = self._read(work)
            request = pending_request(read.entries)
            if request is None:
                return
            assert self._journal is not None
            # Own the saga for the run (docs/adr/0004-single-writer.md, hand-offs): one
            # confirmed SAGA_OPENED, then every step on the journal's hot path.  The writer id
            # is the group's, so any instance can take over from one that died mid-run.
            self._journal.append(
                EntryDraft(
                    saga_id=saga,
                    event_type=EventType.SAGA_OPENED,
                    attributes={attr.COMPENSATION: "delegated"},
                )
            )
            try:
                entries = self._reconcile(saga, self._thread_journal().entries(saga))
                self._journal.preload(saga, entries)
                self._first_call[saga] = request.recorded_at_us
                try:
                    result = self._sagacity.compensate(
                        saga, reason=_reason(request), error=request.error, invoke=self._invoker
                    )
                except ChainIntegrityError as exc:
                    raise _Poison("chain_does_not_verify", exc.message) from exc
                finally:
                    self._first_call.pop(saga, None)
            except BaseException:
                # The journal may hold this saga's tail in memory; another instance may extend
                # the chain next, so that tail must never be written on again.
                self._drop_thread_journal()
                raise
            self._ended(result)
            _failpoints.reach("after_end")
        finally:
            self._claims.unlock_saga(saga)

    def _reconcile(self, saga_id: str, entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
        """Journal outcomes the claims know of but the chain lacks (a crash in between)."""
        assert self._journal is not None
        last: dict[int, JournalEntry] = {}
        for entry in entries:
            if entry.ref_seq is not None and entry.event_type in (
                EventType.COMPENSATION_INTENT,
                EventType.COMPENSATED,
                EventType.COMPENSATION_FAILED,
                EventType.SUSPECT,
            ):
                last[entry.ref_seq] = entry
        open_steps = {
            seq: e for seq, e in last.items() if e.event_type is EventType.COMPENSATION_INTENT
        }
        if not open_steps:
            return entries
        wrote = False
        claims = {claim.step_seq: claim for claim in self._claims.claims(saga_id)}
        for seq, intent in sorted(open_steps.items()):
            claim = claims.get(seq)
            draft = self._recorded_outcome(saga_id, seq, intent, claim)
            if draft is None:
                continue
            self._guard(saga_id)
            self._journal.append(draft, durable=True)
            log.info(
                "journaled the known outcome of an interrupted step: %s",
                draft.event_type.value,
                extra={"saga_id": saga_id, "seq": seq},
            )
            wrote = True
        if not wrote:
            return entries
        return self._thread_journal().entries(saga_id)

    def _recorded_outcome(
        self, saga_id: str, seq: int, intent: JournalEntry, claim: Claim | None
    ) -> EntryDraft | None:
        """The outcome the claim proves for a step whose intent has none on the chain."""

        def make(event: EventType, **fields: Any) -> EntryDraft:
            return EntryDraft(
                saga_id=saga_id, event_type=event, tool=intent.tool, actor=self.writer_id, **fields
            )

        if claim is None:
            if not (intent.actor or "").startswith(WRITER_PREFIX):
                return None  # not written under the claim protocol: nothing is proven
            return make(
                EventType.COMPENSATION_FAILED,
                error=(
                    "interrupted after COMPENSATION_INTENT and before the undo was called "
                    "(no claim was written); it is tried again"
                ),
                attributes={attr.REF_SEQ: str(seq), attr.CAUSE: "error"},
            )
        if claim.status is ClaimStatus.COMPENSATED:
            return make(
                EventType.COMPENSATED,
                result=claim.result,
                attributes={
                    attr.REF_SEQ: str(seq),
                    attr.RESULT_ENCODING: claim.result_encoding or "text",
                },
            )
        if claim.status is ClaimStatus.FAILED:
            return make(
                EventType.COMPENSATION_FAILED,
                error=claim.error or "the compensation failed",
                attributes={attr.REF_SEQ: str(seq), attr.CAUSE: "error"},
            )
        return None  # CLAIMED / TIMED_OUT: the call may have acted; the runner decides

    # --- metrics hooks -------------------------------------------------------------------
    def _starting(self, call: CompensationCall) -> None:
        requested = self._first_call.pop(call.saga_id, None)
        if requested is not None:
            latency = max(0.0, time.time() - requested / 1_000_000)
            self.metrics.start_latency.observe(latency)
        log.info("calling %s", call.target, extra={"saga_id": call.saga_id, "seq": call.seq})

    def _called(self, call: CompensationCall, seconds: float, outcome: str) -> None:
        self.metrics.duration.observe(seconds)
        self.metrics.steps.labels(outcome=outcome).inc()

    def _ended(self, result: SagaResult) -> None:
        self.metrics.sagas.labels(status=result.status.value).inc()
        if result.suspects:
            self.metrics.steps.labels(outcome="suspect").inc(len(result.suspects))
        log.info(
            "saga compensation ended: %s",
            result.summary(),
            extra={"saga_id": result.saga_id, "status": result.status.value},
        )


class _Duplicate(Exception):  # noqa: N818 - a flow signal inside the service
    """The message is a duplicate of an accepted event (its original is acted on)."""
