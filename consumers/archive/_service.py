"""The archiver service: consume the journal topic, archive each batch exactly once, sign heads.

Kafka offsets are never the source of truth: they are stored in Postgres in the transaction
that writes the rows, and on every assignment the consumer seeks to them.  Offsets are also
committed to Kafka afterwards, for lag monitoring only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import Field

from sagacity._decision_signature import DecisionVerifier
from sagacity._defaults import DEFAULT_ARCHIVE_GROUP as DEFAULT_GROUP
from sagacity._defaults import DEFAULT_TOPIC
from sagacity._settings import SagacitySettings
from sagacity._writer_signature import WriterRegistry
from sagacity.consumers.archive._authorship import Authorship
from sagacity.consumers.archive._checkpoints import SignedRound, Signer, sign_pending
from sagacity.consumers.archive._db import connect, ensure_schema
from sagacity.consumers.archive._ingest import BatchArchiver, BatchReport, Decoder, RawEvent
from sagacity.consumers.archive._witness import publish
from sagacity.errors import (
    PersistenceError,
    PersistenceUnavailableError,
    RoundLogError,
    WitnessError,
)
from sagacity.producer._clients import with_logger

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
            events from unregistered writers or with a bad writer signature are quarantined.
            ``None``: any writer is accepted.
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


class ArchiveService:
    """Runs the archive consumer until :meth:`stop` (or a signal handler) is called."""

    def __init__(
        self,
        settings: ArchiveSettings,
        *,
        decode: Decoder | None = None,
        metrics: ArchiveMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else ArchiveMetrics()
        self._authorship = authorship_of(settings)
        self._archiver = BatchArchiver(
            settings.database_url,
            consumer_group=settings.group_id,
            decode=decode,
            authorship=self._authorship,
        )
        self._signer = Signer.from_file(settings.signing_key) if settings.signing_key else None
        self._stop = threading.Event()
        self._alive_at = 0.0
        self._healthy = False
        self._http: ThreadingHTTPServer | None = None

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stop.set()

    @property
    def healthy(self) -> bool:
        """The loop ran recently and its last database operation succeeded."""
        return self._healthy and time.monotonic() - self._alive_at < 30.0

    # --- Kafka callbacks ------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        stored: dict[str, dict[int, int]] = {}
        while True:
            try:
                for topic in {p.topic for p in partitions}:
                    stored[topic] = self._archiver.stored_offsets(topic)
                break
            except PersistenceUnavailableError as exc:
                log.warning("cannot read stored offsets yet: %s", exc.message)
                if self._stop.wait(1.0):
                    return
        for p in partitions:
            p.offset = stored[p.topic].get(p.partition, OFFSET_BEGINNING)
        log.info("assigned %s", [(p.topic, p.partition, p.offset) for p in partitions])
        consumer.assign(partitions)

    # --- the loop ---------------------------------------------------------------------------------
    def _prepare(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self.settings.database_url) as conn:
                    ensure_schema(conn)
                return
            except PersistenceUnavailableError as exc:
                log.warning("archive database unavailable, retrying: %s", exc.message)
                self._stop.wait(1.0)

    def run(self) -> None:
        """Consume and archive until stopped.

        Raises:
            PersistenceError: the database refused a batch for a reason retrying cannot fix.
            KafkaException: a fatal Kafka error.
        """
        if self.settings.metrics_port is not None:
            self._start_http(self.settings.metrics_port)
        self._prepare()
        config: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap_servers,
            "group.id": self.settings.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            **self.settings.kafka_config,
        }
        consumer = Consumer(with_logger(config))
        last_checkpoint = time.monotonic()
        try:
            consumer.subscribe([self.settings.topic], on_assign=self._on_assign)
            while not self._stop.is_set():
                self._alive_at = time.monotonic()
                messages = consumer.consume(
                    num_messages=self.settings.batch_size, timeout=self.settings.poll_timeout
                )
                batch: list[RawEvent] = []
                with_headers = self._authorship.needs_headers
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        if err.fatal():
                            raise KafkaException(err)
                        log.warning("kafka: %s", err)
                        continue
                    batch.append(
                        RawEvent(
                            topic=m.topic() or self.settings.topic,
                            partition=m.partition() or 0,
                            offset=m.offset() or 0,
                            key=m.key(),
                            value=m.value(),
                            headers=_headers(m) if with_headers else None,
                        )
                    )
                if batch:
                    self._archive(consumer, batch)
                else:
                    self._healthy = True
                if self._signer and time.monotonic() - last_checkpoint >= (
                    self.settings.checkpoint_interval
                ):
                    self._checkpoint()
                    last_checkpoint = time.monotonic()
            if self._signer:
                self._checkpoint()
        finally:
            consumer.close()
            self._archiver.close()
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()

    def _archive(self, consumer: Consumer, batch: list[RawEvent]) -> None:
        try:
            report = self._archiver.archive(batch)
        except PersistenceUnavailableError as exc:
            # Nothing was committed: read the same messages again once the database is back.
            self._healthy = False
            log.error("batch not archived, will re-read it: %s", exc.message)
            firsts: dict[tuple[str, int], int] = {}
            for ev in batch:
                firsts.setdefault((ev.topic, ev.partition), ev.offset)
            for (topic, partition), offset in firsts.items():
                consumer.seek(TopicPartition(topic, partition, offset))
            self._stop.wait(1.0)
            return
        self._healthy = True
        self.metrics.record(report)
        if report.quarantined_total:
            log.warning("quarantined %s", {k.value: v for k, v in report.quarantined.items()})
        nexts: dict[tuple[str, int], int] = {}
        for ev in batch:
            nexts[(ev.topic, ev.partition)] = ev.offset + 1
        try:  # informational only (lag dashboards); Postgres holds the real position
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in nexts.items()], asynchronous=True
            )
        except KafkaException as exc:
            log.debug("offset commit to Kafka failed (harmless): %s", exc)

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
            signed = sign_pending(self._archiver.connection(), self._signer, on_round=signed_round)
        except (PersistenceError, RoundLogError) as exc:
            log.error("checkpoint not signed this time: %s", exc.message)
            signed = 0
        self.metrics.signed.inc(signed)
        if latest and self.settings.witness is not None:
            try:
                publish(self.settings.witness, latest[0], public_hex=self._signer.public_hex)
            except WitnessError as exc:
                log.error("round %d not published: %s", latest[0].round_id, exc.message)

    # --- /metrics and /healthz -----------------------------------------------------------------
    def _start_http(self, port: int) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    ok = service.healthy
                    body = b"ok\n" if ok else b"unhealthy\n"
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
