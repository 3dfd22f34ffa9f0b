"""The compensation service's settings (``SAGACITY_COMPENSATION_X``, then ``SAGACITY_X``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from sagacity.config._defaults import DEFAULT_COMPENSATION_GROUP, DEFAULT_TOPIC
from sagacity.config._read_index import ReadIndexSettings
from sagacity.config._settings import SagacitySettings


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
    topic: str = DEFAULT_TOPIC
    group_id: str = DEFAULT_COMPENSATION_GROUP
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
    """The service's writer signing key file (``SAGACITY_COMPENSATION_WRITER_KEY`` or
    ``SAGACITY_WRITER_KEY``), registered with the archive under ``sagacity-compensation/<group>``;
    ``None``: unsigned (docs/adr/0014-signed-decisions-and-writers.md)."""
    journal_name: str | None = Field(default=None, min_length=1, max_length=256)
    """The journal's name (``SAGACITY_JOURNAL_NAME``; default ``kafka:<cluster id>/<topic>``):
    what settlements and claims are bound to (docs/adr/0025-trust-model.md)."""
    writer_registry: str | None = None
    """The writer registry (``SAGACITY_WRITER_REGISTRY``, as the archive's): the service reads
    a saga's events only from registered writers allowed to write them there, so a forged
    ``EXECUTED`` or ``COMPENSATED`` in another writer's saga plans nothing (docs/adr/0014 §5)."""
    approvals_public_key: str | None = None
    """The pinned approvals key(s) (``SAGACITY_APPROVALS_PUBLIC_KEY``): a ``SUSPECT_SETTLED``
    is acted on only when it verifies; without one, no settlement is acted on."""
    operator_public_key: str | None = None
    """The pinned operator key(s) (``SAGACITY_OPERATOR_PUBLIC_KEY``, hex or key files,
    comma-separated): a ``COMPENSATION_REQUESTED`` after a saga's end is acted on only when
    one of them signed it (``sagacity saga compensate``); without one, none is."""
