"""The archiver service: consume the journal topic, archive each batch exactly once, sign heads.

Kafka offsets are never the source of truth: they are stored in Postgres in the transaction
that writes the rows, and on every assignment the consumer seeks to them.  Offsets are also
committed to Kafka afterwards, for lag monitoring only.  The loop is the services' consumer
runtime (``sagacity.consumers._runtime``) with table positions; poison is quarantined by the
batch itself (``archive_quarantine``, in the transaction that stores the position), since only
the batch knows a fork or a gap from the archived heads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import Field

from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP as DEFAULT_GROUP
from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.config._settings import SagacitySettings
from sagacity.consumers._runtime import (
    Handler,
    Record,
    Redeliver,
    RuntimeOptions,
    SkipAndCount,
    TablePositions,
)
from sagacity.consumers.archive._authorship import Authorship
from sagacity.consumers.archive._checkpoints import (
    SignedRound,
    Signer,
    parse_public_key,
    sign_pending,
)
from sagacity.consumers.archive._findings import Finding
from sagacity.consumers.archive._ingest import BatchArchiver, BatchReport, Decoder, RawEvent
from sagacity.consumers.archive._ledger import IngestLedger
from sagacity.consumers.archive._timewindow import (
    DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_FUTURE_S,
    TimeWindow,
)
from sagacity.consumers.archive._witness import publish
from sagacity.errors import (
    ConfigurationError,
    JournalError,
    PersistenceError,
    PersistenceUnavailableError,
    RoundLogError,
    WitnessError,
)
from sagacity.ports import Dependencies
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._writer_signature import WriterRegistry
from sagacity.telemetry import _tracing

log = logging.getLogger("sagacity.archive")


class ArchiveSettings(SagacitySettings):
    """How the archiver runs: each setting ``x`` from ``SAGACITY_ARCHIVE_X``, then
    ``SAGACITY_X`` (pydantic-settings; keywords win; the CLI passes its options).

    Attributes:
        bootstrap_servers / topic / group_id: where to read.
        database_url: the archive (its search_path picks the schema).
        batch_size: messages per transaction at most.
        poll_timeout: seconds to wait for a batch to fill.
        signing_key: Ed25519 key file for checkpoints; ``None`` disables signing.
        checkpoint_interval: seconds between checkpoint runs.
        metrics_port / metrics_host: where ``/metrics`` and ``/healthz`` are served
            (``PORT`` / ``HOST``, or ``METRICS_PORT`` as earlier releases spelt it); ``None``
            for none.
        witness: a file path or http(s) URL outside the archive's database where the latest
            signed round is published (docs/adr/0015-round-log.md); ``None`` for none.
        kafka_config: extra librdkafka settings (TLS, SASL …).
        approvals_public_key: the pinned approvals key(s) (hex or files, comma-separated;
            ``SAGACITY_APPROVALS_PUBLIC_KEY``): decisions whose signature does not verify are
            quarantined.  ``None``: decisions are archived unchecked (a warning at start).
        writer_registry: the writer registry file (``SAGACITY_ARCHIVE_WRITER_REGISTRY``):
            events from unregistered writers or with a bad writer signature are quarantined,
            and events a writer may not write in that saga (its role, docs/adr/0014 §5).
            ``None``: any writer is accepted.
        previous_public_keys: public keys this archive signed with before ``signing_key``
            (hex or files, comma-separated): after a restart, a saga resumes from its last head
            signed under any of them or the current key (docs/adr/0012, "The signer's input").
        max_future_s / max_age_s: how far ahead of and behind the archiver's clock an event
            may be dated (one day, two years); others are quarantined ``time_out_of_range``
            and no partition is made for them (docs/adr/0006, "Partitioning").
        sign_when_pending: sign at once, without waiting for the interval, when this many
            sagas' attested heads wait for a round (bounds the ledger's memory).
    """

    env_service: ClassVar[str] = "ARCHIVE"
    env_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "group_id": ("GROUP",),
        "metrics_port": ("PORT",),
        "metrics_host": ("HOST",),
    }
    env_excluded: ClassVar[frozenset[str]] = frozenset({"kafka_config"})

    bootstrap_servers: str = Field(min_length=1)
    database_url: str = Field(min_length=1)
    topic: str = DEFAULT_TOPIC
    group_id: str = DEFAULT_GROUP
    batch_size: int = Field(default=2_000, gt=0)
    poll_timeout: float = Field(default=0.5, gt=0)
    signing_key: Path | None = None
    checkpoint_interval: float = Field(default=60.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    witness: str | None = None
    kafka_config: Mapping[str, str] = Field(default_factory=dict)
    approvals_public_key: str | None = None
    writer_registry: Path | None = None
    previous_public_keys: str | None = None
    max_future_s: float = Field(default=DEFAULT_MAX_FUTURE_S, ge=0)
    max_age_s: float = Field(default=DEFAULT_MAX_AGE_S, ge=0)
    sign_when_pending: int = Field(default=50_000, gt=0)


class ArchiveMetrics:
    """The archiver's Prometheus metrics, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.archived = Counter("sagacity_archive_events", "Events archived", registry=r)
        self.duplicates = Counter(
            "sagacity_archive_duplicates", "Redelivered events ignored", registry=r
        )
        self.quarantined = Counter(
            "sagacity_archive_quarantined", "Events quarantined", ["reason"], registry=r
        )
        self.batches = Counter("sagacity_archive_batches", "Batches committed", registry=r)
        self.retries = Counter(
            "sagacity_archive_batch_retries",
            "Batch attempts that failed and were retried",
            registry=r,
        )
        self.batch_seconds = Histogram(
            "sagacity_archive_batch_seconds", "Time to archive one batch", registry=r
        )
        self.signed = Counter(
            "sagacity_archive_checkpoints_signed", "Heads signed in checkpoints", registry=r
        )
        self.rounds = Counter(
            "sagacity_archive_signing_rounds",
            "Signing rounds (one signature over a Merkle root of heads)",
            registry=r,
        )
        self.findings = Counter(
            "sagacity_archive_findings",
            "Sagas whose table holds what the archiver did not read from the topic",
            ["reason"],
            registry=r,
        )
        self.again = Counter(
            "sagacity_archive_reread",
            "Messages read again after a restart to re-verify what was not signed yet",
            registry=r,
        )
        self.last_batch = Gauge(
            "sagacity_archive_last_commit_timestamp_seconds",
            "When a batch last committed",
            registry=r,
        )

    def record(self, report: BatchReport) -> None:
        """Count one committed batch."""
        self.archived.inc(report.archived)
        self.duplicates.inc(report.duplicates)
        for reason, count in report.quarantined.items():
            self.quarantined.labels(reason=reason.value).inc(count)
        for finding, times in report.findings.items():
            self.findings.labels(reason=finding).inc(times)
        self.again.inc(report.again)
        self.batches.inc()
        self.retries.inc(report.attempts - 1)
        self.batch_seconds.observe(report.seconds)
        self.last_batch.set_to_current_time()


def _headers(message: Any) -> dict[str, bytes]:
    return {k: v for k, v in (message.headers() or ()) if isinstance(v, bytes)}


def authorship_of(settings: ArchiveSettings) -> Authorship:
    """The authorship checks ``settings`` ask for.

    Raises:
        ConfigurationError: the approvals key or the writer registry is unusable.
    """
    approvals = (
        DecisionVerifier.parse(settings.approvals_public_key)
        if settings.approvals_public_key
        else None
    )
    if approvals is None:
        log.warning(
            "no approvals public key pinned (SAGACITY_APPROVALS_PUBLIC_KEY): decisions are "
            "archived without checking their signatures"
        )
    writers = (
        WriterRegistry.from_file(settings.writer_registry) if settings.writer_registry else None
    )
    if writers is not None:
        log.info("only the %d registered writers' signed events are archived", len(writers))
    return Authorship(approvals=approvals, writers=writers)


def archiver_of(
    settings: ArchiveSettings,
    *,
    signer: Signer | None,
    dependencies: Dependencies,
    authorship: Authorship | None = None,
    decode: Decoder | None = None,
) -> BatchArchiver:
    """The batch archiver ``settings`` ask for, signing (or not) with ``signer``: the service's,
    and ``sagacity archive checkpoint``'s.  ``dependencies`` (:func:`sagacity.compose.archive`)
    give the journal's wire format, its partitioner and the key service.

    Raises:
        ConfigurationError: the approvals key or the writer registry is unusable, or
            ``dependencies`` lack the wire format or the partitioner.
        SigningKeyError: a previous public key is not one.
    """
    if dependencies.partitioner is None or (dependencies.wire is None and decode is None):
        raise ConfigurationError(
            "the archive is handed the journal's wire format and partitioner "
            "(sagacity.compose.archive)"
        )
    if dependencies.archive_store is None:
        raise ConfigurationError("the archive is handed its store (sagacity.compose.archive)")
    signed_keys = [
        *([signer.public_raw] if signer else []),
        *(
            parse_public_key(k.strip())
            for k in (settings.previous_public_keys or "").split(",")
            if k.strip()
        ),
    ]
    return BatchArchiver(
        dependencies.archive_store(settings.database_url),
        consumer_group=settings.group_id,
        partitioner=dependencies.partitioner,
        wire=dependencies.wire,
        decode=decode,
        authorship=authorship if authorship is not None else authorship_of(settings),
        keys=dependencies.keys,
        time_window=TimeWindow(max_future_s=settings.max_future_s, max_age_s=settings.max_age_s),
        signed_keys=signed_keys,
        ledger=IngestLedger(signing=signer is not None),
    )


class ArchiveService(Handler[Record]):
    """Runs the archive consumer until :meth:`stop` (or a signal handler) is called.

    Args:
        settings: see :class:`ArchiveSettings`.
        decode: the message decoder (default: the journal's wire format).
        metrics: the counters to serve (default: new ones).
        dependencies: what the service is handed (:func:`sagacity.compose.archive`): the
            consumer runtime on the topic's transport, the passes over the topic (the
            partition count of the placement check), the journal's wire format and
            partitioner, and the key service filling the value columns of sealed events (its
            caller closes it); a sealed field that fails authentication is quarantined,
            reason ``authentication failed`` (docs/adr/0019-erasure.md §3).

    Raises:
        ConfigurationError: ``dependencies`` lack the consumer runtime, the passes over the
            topic, the wire format or the partitioner.
    """

    def __init__(
        self,
        settings: ArchiveSettings,
        *,
        decode: Decoder | None = None,
        metrics: ArchiveMetrics | None = None,
        dependencies: Dependencies,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else ArchiveMetrics()
        self._authorship = authorship_of(settings)
        self._signer = Signer.from_file(settings.signing_key) if settings.signing_key else None
        self._archiver = archiver_of(
            settings,
            signer=self._signer,
            dependencies=dependencies,
            authorship=self._authorship,
            decode=decode,
        )
        self._stop = threading.Event()
        self._healthy = False
        self._http: ThreadingHTTPServer | None = None
        self._last_checkpoint = time.monotonic()
        consumers, passes = dependencies.consumers, dependencies.topic_passes
        if consumers is None or passes is None:
            raise ConfigurationError(
                "the archive is handed its consumer runtime and passes over the topic "
                "(sagacity.compose.archive)"
            )
        self._passes = passes
        self._client = consumers.client_config(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=settings.group_id,
            client=settings.kafka_config,
        )
        self.runtime = consumers.runtime(
            RuntimeOptions(
                topic=settings.topic,
                config=self._client,
                batch_size=settings.batch_size,
                poll_timeout_s=settings.poll_timeout,
                name="archive consumer",
            ),
            self,
            # Positions the table does not hold start at the beginning: the archive must see
            # every event, whatever the group committed to Kafka before.
            # With a signer, each partition starts where what was ingested is all signed: what
            # an earlier process archived after that is read again, to be signed by this one.
            positions=TablePositions(
                self._archiver.start_offsets if self._signer else self._archiver.stored_offsets,
                from_beginning=True,
            ),
            # Undecodable and refused events are quarantined by the batch (see the module);
            # nothing reaches the runtime's policy.
            poison=SkipAndCount(),
            stop=self._stop,
        )

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stop.set()

    @property
    def healthy(self) -> bool:
        """The loop ran recently and its last database operation succeeded."""
        return self._healthy and time.monotonic() - self.runtime.alive_at < 30.0

    # --- the loop ---------------------------------------------------------------------------------
    def _prepare(self) -> None:
        while not self._stop.is_set():
            try:
                self._archiver.prepare()
                return
            except PersistenceUnavailableError as exc:
                log.warning("archive database unavailable, retrying: %s", exc.message)
                self._stop.wait(1.0)

    def run(self) -> None:
        """Consume and archive until stopped.

        Raises:
            PersistenceError: the database refused a batch for a reason retrying cannot fix.
            one of the consumer runtime's transport errors: a fatal client error.
        """
        if self.settings.metrics_port is not None:
            self._start_http(self.settings.metrics_port)
        self._prepare()
        self._last_checkpoint = time.monotonic()
        try:
            self.runtime.run()
            if self._signer:
                self._checkpoint()
        finally:
            self._archiver.close()
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()

    # --- the runtime's hooks ----------------------------------------------------------------------
    def tick(self) -> None:
        """Sign a checkpoint when one is due."""
        if self._signer and time.monotonic() - self._last_checkpoint >= (
            self.settings.checkpoint_interval
        ):
            self._checkpoint()
            self._last_checkpoint = time.monotonic()

    def idle(self) -> None:
        """Nothing to archive: the loop is healthy."""
        self._healthy = True

    def on_revoking(self, partitions: Sequence[int], *, lost: bool) -> None:
        """Sign what this process read from ``partitions`` (it did read it, whoever owns them
        next), then forget them: their heads move without this process from now on."""
        del lost
        if self._signer:
            self._checkpoint()
        self._archiver.ledger.forget(self.settings.topic, partitions)

    def _partitions(self, topic: str) -> None:
        """Learn ``topic``'s partition count (the placement check) once, from a pass over it."""
        if topic in self._archiver.partitions:
            return
        try:
            with self._passes(topic, config=self._client, timeout_s=10.0) as scan:
                count = len(scan.bounds())
        except JournalError as exc:
            raise Redeliver(f"cannot read the partition count of {topic}: {exc}") from exc
        self._archiver.partitions[topic] = count

    def handle(self, messages: Sequence[Record]) -> None:
        """Archive ``messages`` in one transaction with their positions.

        Raises:
            Redeliver: the database is away; nothing was committed.
        """
        with_headers = self._authorship.needs_headers
        for topic in {m.topic() or self.settings.topic for m in messages}:
            self._partitions(topic)
        batch = [
            RawEvent(
                topic=m.topic() or self.settings.topic,
                partition=m.partition() or 0,
                offset=m.offset() or 0,
                key=m.key(),
                value=m.value(),
                headers=_headers(m) if with_headers else None,
            )
            for m in messages
        ]
        try:
            report = self._archive(batch, messages)
        except PersistenceUnavailableError as exc:
            # Nothing was committed: read the same messages again once the database is back.
            self._healthy = False
            log.error("batch not archived, will re-read it: %s", exc.message)
            raise Redeliver(exc.message, retry_s=1.0) from exc
        self._healthy = True
        self.metrics.record(report)
        if report.quarantined_total:
            log.warning("quarantined %s", {k.value: v for k, v in report.quarantined.items()})
        if self._signer and self._archiver.ledger.pending_count >= self.settings.sign_when_pending:
            self._checkpoint()
            self._last_checkpoint = time.monotonic()

    def _archive(self, batch: list[RawEvent], messages: Sequence[Record]) -> BatchReport:
        """Archive ``batch`` in its span, linked to the traces its events carry."""
        links = _tracing.message_traceparents(messages)
        attributes = {"sagacity.archive.events": len(batch)}
        with _tracing.span("archive batch", attributes=attributes, links=links) as span:
            report = self._archiver.archive(batch)
            span.set("sagacity.archive.archived", report.archived)
            span.set("sagacity.archive.quarantined", report.quarantined_total)
            span.outcome = "archived"
            return report

    def _checkpoint(self) -> None:
        assert self._signer is not None
        latest: list[SignedRound] = []

        def signed_round(signed: SignedRound) -> None:
            self.metrics.rounds.inc()
            latest[:] = [signed]
            # The line to publish: a later `sagacity verify --round ID:ROOT` catches rounds
            # removed after it (docs/adr/0015-round-log.md).
            log.info(
                "signed round %d:%s (%d head(s), log of %s, key %s)",
                signed.round_id,
                signed.root,
                signed.leaf_count,
                signed.tree_size,
                signed.key_id,
            )

        try:
            signed = sign_pending(
                self._archiver.signing(),
                self._signer,
                self._archiver.ledger,
                on_round=signed_round,
                consumer_group=self.settings.group_id,
                on_finding=self._found,
            )
            for finding in self._archiver.moved_heads(self.settings.topic, self.runtime.assigned):
                self._found(finding)
        except (PersistenceError, RoundLogError) as exc:
            log.error("checkpoint not signed this time: %s", exc.message)
            signed = 0
        self.metrics.signed.inc(signed)
        if latest and self.settings.witness is not None:
            try:
                publish(self.settings.witness, latest[0], public_hex=self._signer.public_hex)
            except WitnessError as exc:
                log.error("round %d not published: %s", latest[0].round_id, exc.message)

    def _found(self, finding: Finding) -> None:
        self.metrics.findings.labels(reason=finding.reason.value).inc()

    # --- /metrics and /healthz -----------------------------------------------------------------
    def quarantine_report(self) -> bytes:
        """``quarantined N (reason: n, …)`` for ``/healthz``: what this instance set aside."""
        counts: dict[str, float] = {}
        for family in self.metrics.quarantined.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.value:
                    reason = sample.labels.get("reason", "")
                    counts[reason] = counts.get(reason, 0.0) + sample.value
        if not counts:
            return b""
        listed = ", ".join(f"{reason}: {int(n)}" for reason, n in sorted(counts.items()))
        return f"quarantined {int(sum(counts.values()))} ({listed})\n".encode()

    def _start_http(self, port: int) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    ok = service.healthy
                    # Quarantined events are reported, never a reason to be unhealthy.
                    body = (b"ok\n" if ok else b"unhealthy\n") + service.quarantine_report()
                    self.send_response(200 if ok else 503)
                    self.send_header("Content-Type", "text/plain")
                elif self.path == "/metrics":
                    body = generate_latest(service.metrics.registry)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                else:
                    body = b"not found\n"
                    self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer((self.settings.metrics_host, port), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
