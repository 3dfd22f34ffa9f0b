"""The compensation service: a consumer group on the journal topic that finishes sagas.

On each ``COMPENSATION_REQUESTED`` the service waits for the requesting run's ``SAGA_ENDED``
(or a grace), then hands the saga to a worker running its per-saga job (``_job.py``: the
saga's lock, its chain checked, claims, undo calls, the outcome journaled).  Offsets are
committed only once the work of every earlier message of the partition is done
(``enable.auto.commit=false``).  See docs/adr/0007-compensation-exactly-once.md.  The loop is
the services' consumer runtime (handed as ``Dependencies.consumers``; its rules in
``sagacity.consumers._runtime``) with Kafka positions and the dead-letter topic for poison.
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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from sagacity.consumers._runtime import (
    ConsumerLoop,
    Consumers,
    DeadLetterSender,
    DeadLetterTopic,
    Handler,
    KafkaCommits,
    Ledger,
    Record,
    RuntimeOptions,
)
from sagacity.consumers._tools import register_tools
from sagacity.consumers.compensation._invoker import ClaimingInvoker
from sagacity.consumers.compensation._job import (
    WRITER_PREFIX,
    JobContext,
    SagaJob,
)
from sagacity.consumers.compensation._journal import Revoked, ServiceJournal, declarations
from sagacity.consumers.compensation._locks import SagaLocks
from sagacity.consumers.compensation._metrics import HealthServer, Metrics
from sagacity.consumers.compensation._settings import CompensationSettings
from sagacity.consumers.compensation._workers import WorkerJournals, not_handed
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import (
    ConfigurationError,
    DeclarationError,
    SerializationError,
    ToolLoadError,
    UnopenableError,
)
from sagacity.ports import ClaimStore, Dependencies, TopicJournal
from sagacity.privacy._keys import KeyService
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.saga._saga import Sagacity
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.signing._writer_signature import WriterKey, WriterRegistry
from sagacity.undo._compensation import CompensationCall

log = logging.getLogger("sagacity.compensation")


@dataclass(kw_only=True)
class _Partition(Ledger):
    """One assigned partition: its offsets' ledger, its jobs, and whether it is going."""

    number: int
    jobs: set[concurrent.futures.Future[None]] = field(default_factory=set)
    revoking: bool = False


@dataclass(frozen=True, kw_only=True)
class _Work:
    message: Record
    entry: JournalEntry
    partition: _Partition
    deadline: float

    @property
    def offset(self) -> int:
        offset = self.message.offset()
        return -1 if offset is None else offset


class CompensationService(Handler[Record]):
    """Runs the compensation consumer until :meth:`stop` (SIGTERM) is called.

    Args:
        settings: see :class:`CompensationSettings`.
        register: registers further tools on each ``Sagacity`` the service makes (the tools
            of an upstream MCP server, declared by a tool policy); with it ``settings.tools``
            may be empty.
        dependencies: what the service is handed (:func:`sagacity.compose.compensation`
            builds them): its claim store, its journals' read index, and the key service
            opening sealed sagas and sealing what the service journals for them
            (docs/adr/0019-erasure.md §3; its caller closes it).  A message whose sealed
            field cannot be opened is dead-lettered with the reason (``authentication
            failed``, ``data key not found``, ``key-encryption key not held``), and the
            service goes on.

    Raises:
        ToolLoadError: a ``--tools`` target cannot be imported, or no tool is given (raised
            here, at start).
    """

    def __init__(
        self,
        settings: CompensationSettings,
        *,
        register: Callable[[Sagacity], None] | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self.settings = settings
        self._register = register
        self._dependencies = dependencies or Dependencies()
        keys: KeyService | None = self._dependencies.keys
        self._keys = keys
        self._decode = self._dependencies.decode or not_handed
        self.instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.writer_id = f"{WRITER_PREFIX}{self.instance}/{uuid.uuid4().hex[:8]}"
        self.metrics = Metrics()
        self.dead_lettered: dict[str, int] = {}
        """Messages this instance dead-lettered, by reason (``/healthz`` reports them)."""
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._parts: dict[int, _Partition] = {}
        self._completions: queue.SimpleQueue[tuple[_Partition, int, bool]] = queue.SimpleQueue()
        self._saga_locks = SagaLocks()
        self._awaiting: dict[str, _Work] = {}
        self._first_call: dict[str, int] = {}
        self._kafka: TopicJournal | None = None
        self._journals = WorkerJournals(
            self._dependencies.journals,
            writer_id=f"{WRITER_PREFIX}{settings.group_id}",
            writer_key=WriterKey.from_file(
                settings.writer_key, f"{WRITER_PREFIX}{settings.group_id}"
            )
            if settings.writer_key
            else None,
            writers=WriterRegistry.from_file(settings.writer_registry)
            if settings.writer_registry
            else None,
        )
        self._journal: ServiceJournal | None = None
        # A bad pinned key stops the start-up, naming the setting (its own configuration).
        self._operator = (
            OperatorVerifier.parse(settings.operator_public_key)
            if settings.operator_public_key
            else None
        )
        # Tools first: an un-importable target must fail before anything connects. They are
        # admitted as the service's journals run them: sealing with keys (a tool may redact).
        self._sealed = keys is not None
        declared = declarations(seals=self._sealed)
        self._sagacity = Sagacity(
            journal=declared, compensation="delegated", writer_id=self.writer_id
        )
        self.tool_names = self._register_tools(self._sagacity)
        # Made at start: the claims' key names the journal, whose cluster id Kafka tells.
        self._claims: ClaimStore | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="compensation"
        )
        self._runtime: ConsumerLoop | None = None
        self._jobs: JobContext | None = None
        self._dead: DeadLetterSender | None = None
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
        if (claims := self._dependencies.claims) is None:
            raise ConfigurationError("no claim store handed (sagacity.compose.compensation)")
        if self._dependencies.decode is None:
            raise ConfigurationError("no decoder handed (sagacity.compose.compensation)")
        if (consumers := self._dependencies.consumers) is None:
            raise ConfigurationError("no consumer runtime handed (sagacity.compose.compensation)")
        self._kafka = self._journals.new()
        self._claims = claims(instance=self.instance, journal=self._kafka.identity)
        self._claims.ensure_schema()
        invoker = self._invoker(self._claims)
        self._journal = ServiceJournal(
            self._journals.of_thread, may_write=self._may_write, seals=self._sealed
        )
        self._sagacity = Sagacity(
            journal=self._journal,
            compensation="delegated",
            writer_id=self.writer_id,
            # A SUSPECT_SETTLED counts only when the approvals service signed it (ADR 0014).
            approvals_public_key=s.approvals_public_key,
        )
        self._register_tools(self._sagacity)
        dlq = s.dlq_topic or f"{s.topic}.dlq"
        self._dead = consumers.dead_letters(self._base_config(), dlq, timeout_s=15)
        self._runtime = self._consumer_runtime(consumers, self._dead)
        self._jobs = self._job_context(invoker, self._runtime)
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
        if self._operator is None:
            log.warning(
                "no operator key pinned (SAGACITY_OPERATOR_PUBLIC_KEY): a compensation "
                "requested after a saga ended is refused (dead-lettered), never acted on"
            )

    def _consumer_runtime(self, consumers: Consumers, dead: DeadLetterSender) -> ConsumerLoop:
        """The consumer loop: Kafka positions, poison to the dead-letter topic ``dead``."""
        s = self.settings
        tuning: dict[str, str | int | float | bool] = {
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": max(500, s.session_timeout_ms // 5),
            "max.poll.interval.ms": max(300_000, int(s.compensation_timeout_s * 4000)),
        }
        if s.instance_id:
            tuning["group.instance.id"] = s.instance_id
        return consumers.runtime(
            RuntimeOptions(
                topic=s.topic,
                config=consumers.client_config(
                    bootstrap_servers=s.bootstrap_servers,
                    group_id=s.group_id,
                    client=s.client,
                    defaults={"fetch.wait.max.ms": 50, "fetch.min.bytes": 1},
                    tuning=tuning,
                ),
                # One message at a time: back-pressure (pausing) is decided between messages.
                batch_size=1,
                poll_timeout_s=0.1,
                name="compensation consumer",
            ),
            self,
            positions=KafkaCommits(self._ready_offsets, done=self._done_at),
            poison=DeadLetterTopic(dead, on_parked=self._dead_lettered),
            stop=self._stopping,
            lag=lambda number, lag: self.metrics.lag.labels(partition=str(number)).set(lag),
            lag_gone=self._lag_gone,
        )

    def _invoker(self, claims: ClaimStore) -> ClaimingInvoker:
        """The undo caller: each call claimed in ``claims`` first, bounded by the timeout."""
        return ClaimingInvoker(
            claims,
            timeout_s=self.settings.compensation_timeout_s,
            on_call=self._called,
            on_start=self._starting,
        )

    def _job_context(self, invoker: ClaimingInvoker, runtime: ConsumerLoop) -> JobContext:
        """What every saga's job runs with (the service's journals, claims and hooks)."""
        assert self._claims is not None
        assert self._journal is not None
        return JobContext(
            sagacity=self._sagacity,
            journal=self._journal,
            claims=self._claims,
            invoker=invoker,
            writer_id=self.writer_id,
            thread_journal=self._journals.of_thread,
            drop_thread_journal=self._journals.drop_thread,
            may_write=self._may_write,
            saga_lock=self._saga_locks.hold,
            dead_letter=lambda message, reason, detail, go_on: runtime.poison(
                message, reason=reason, detail=detail, go_on=go_on
            ),
            first_call=self._first_call,
            ended=self._ended,
            operator=self._operator,
            refused=lambda reason: self.metrics.refused.labels(reason=reason).inc(),
        )

    def run(self) -> None:
        """Start, then consume until :meth:`stop`; finishes the steps in flight and returns."""
        self.start()
        assert self._runtime is not None
        try:
            self._runtime.run()
        finally:
            self._shutdown()

    def tick(self) -> None:
        """Record finished work, start the requests whose grace ran out, apply back-pressure."""
        self._drain()
        self._submit_expired()
        if self._runtime is not None:
            self._runtime.hold(self._in_flight() >= self.settings.concurrency * 8)

    def handle(self, messages: Sequence[Record]) -> None:
        """Take ``messages`` on (the work runs on the pool; offsets commit when it is done)."""
        for message in messages:
            self._handle(message)

    def closing(self) -> None:
        """Let the steps in flight finish and record them before the last commit."""
        self._stopping.set()
        with self._lock:
            jobs = [job for part in self._parts.values() for job in part.jobs]
        concurrent.futures.wait(jobs)
        self._drain()

    def _shutdown(self) -> None:
        self._stopping.set()
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
    def _dead_lettered(self, reason: str) -> None:
        self.metrics.dead_letters.labels(reason=reason).inc()
        with self._lock:
            self.dead_lettered[reason] = self.dead_lettered.get(reason, 0) + 1

    def _healthy(self) -> tuple[bool, str]:
        runtime = self._runtime
        idle = time.monotonic() - runtime.alive_at if runtime is not None else 0.0
        if idle > 30:
            return False, f"consumer loop stalled for {idle:.0f}s"
        # A dead-lettered message is that message's fate: reported here, never unhealthy.
        with self._lock:
            parked = sorted(self.dead_lettered.items())
        if not parked:
            return True, "ok"
        counts = ", ".join(f"{reason}: {n}" for reason, n in parked)
        return True, f"ok; dead-lettered {sum(n for _, n in parked)} ({counts})"

    def _ready(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "stopping"
        if self._runtime is None or not self._runtime.joined:
            return False, "not yet a member of the consumer group"
        if self._claims is None or not self._claims.ping():
            return False, "claims database does not answer"
        return True, "ready"

    # --- rebalance -----------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[int]) -> None:
        """Start a ledger for each partition."""
        with self._lock:
            for number in partitions:
                self._parts[number] = _Partition(number=number)

    def on_revoking(self, partitions: Sequence[int], *, lost: bool) -> None:
        """Stop the jobs of ``partitions`` before their next step and record what finished.

        Requests still waiting for their grace are dropped uncommitted: the next owner sees
        them again.  The runtime then commits (unless ``lost``) and calls :meth:`on_released`.
        """
        del lost
        numbers = set(partitions)
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

    def on_released(self, partitions: Sequence[int]) -> None:
        """Forget ``partitions``."""
        with self._lock:
            for n in partitions:
                self._parts.pop(n, None)

    def _lag_gone(self, number: int) -> None:
        with contextlib.suppress(KeyError):
            self.metrics.lag.remove(str(number))  # another instance reports it now

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

    def _ready_offsets(self, only: Collection[int] | None) -> dict[int, int]:
        """The next offsets to commit that moved since the last commit (marked committed)."""
        offsets: dict[int, int] = {}
        with self._lock:
            for part in self._parts.values():
                if only is not None and part.number not in only:
                    continue
                if part.commit_at is not None and part.commit_at != part.committed:
                    offsets[part.number] = part.commit_at
                    part.committed = part.commit_at
        return offsets

    def _done_at(self, number: int) -> int | None:
        with self._lock:
            part = self._parts.get(number)
        if part is None:
            return None
        return part.commit_at if part.commit_at is not None else part.committed

    # --- messages ------------------------------------------------------------------------
    def _handle(self, message: Record) -> None:
        number = message.partition()
        offset = message.offset()
        if number is None or offset is None:
            return
        with self._lock:
            part = self._parts.get(number)
            if part is None or part.revoking:
                log.debug("message of a partition being released skipped", extra={"offset": offset})
                return
            part.add(offset)
        try:
            entry = self._decode(message.value() or b"", keys=self._keys)
        except SerializationError as exc:
            self._dead_letter_now(message, part, "undecodable", exc.message)
            return
        except UnopenableError as exc:
            # This saga's key (missing, under a KEK not held, altered): the message's fate.
            self._dead_letter_now(message, part, exc.reason, exc.message)
            return
        if entry.event_type is EventType.ERASED:
            key = message.key()
            self._forget(entry.saga_id, key.decode("utf-8", "replace") if key else entry.saga_id)
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

    def _forget(self, *saga_ids: str) -> None:
        """Drop what every journal of this instance keeps opened of the saga an ``ERASED``
        names (by its key and its body): a job reading it next opens it through the key
        service, which refuses an erased saga's key (docs/operations/erasure.md)."""
        journals = list(self._journals)
        for saga_id in dict.fromkeys(saga_ids):
            for journal in journals:
                journal.forget(saga_id)
            if self._journal is not None:
                self._journal.forget(saga_id)

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
                # Uncommitted: the partition's next owner reads the request again.
                log.info(
                    "request left to the partition's next owner",
                    extra={"saga_id": work.entry.saga_id, "offset": work.offset},
                )
                return
            self.metrics.in_flight.inc()
            # Registered before the job can finish, so its completion always finds it.
            job = self._executor.submit(self._job, work)
            part.jobs.add(job)
        job.add_done_callback(lambda f: self._finished(work, f))

    def _dead_letter_now(self, message: Record, part: _Partition, reason: str, detail: str) -> None:
        assert self._runtime is not None
        offset = message.offset() or 0
        if self._runtime.poison(message, reason=reason, detail=detail):
            self._completions.put((part, offset, True))

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
    def _job(self, work: _Work) -> None:
        assert self._jobs is not None
        SagaJob(
            self._jobs,
            message=work.message,
            request=work.entry,
            offset=work.offset,
            deadline=work.deadline,
        ).run()

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
