"""Typed configuration of the Kafka journal.

These objects read no environment variable: a journal built in code is configured by its code
alone.  :mod:`sagacity._env` reads the ``SAGACITY_*`` variables named below into them (the
``from_env`` path of ``Sagacity``, the services and the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.config._read_index import ReadIndexSettings

__all__ = ["DEFAULT_TOPIC", "KafkaJournalSettings", "ReadIndexSettings"]

# Settings the journal's guarantees depend on: a client setting may not weaken them.
_FIXED = frozenset(
    {
        "acks",
        "request.required.acks",
        "enable.idempotence",
        "partitioner",
        "enable.auto.commit",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
    }
)


class KafkaJournalSettings(BaseModel):
    """Where the journal lives and how long it waits for the broker.

    Attributes:
        bootstrap_servers: ``host:port[,host:port…]`` (``SAGACITY_BOOTSTRAP_SERVERS``).
        topic: the journal topic (``SAGACITY_TOPIC``, default ``sagacity.journal``).
        ack_timeout_s: the longest a durable append waits for the broker's acknowledgement
            (``SAGACITY_ACK_TIMEOUT_S``); past it the append fails and the tool is not called.
        startup_timeout_s: the longest start-up waits to reach the broker and describe the
            topic (``SAGACITY_STARTUP_TIMEOUT_S``).
        read_timeout_s: the longest a read of one partition may take
            (``SAGACITY_READ_TIMEOUT_S``).
        lease_ttl_s: the writer's lease (``SAGACITY_LEASE_TTL_S``, default 60): a writer
            appends without re-reading the topic only while its last acknowledged event is
            younger than this minus :attr:`lease_margin_s`; another process may take a saga
            whose last event is older than this plus ``max_clock_skew_s``
            (docs/adr/0011-writer-lease.md). Recorded on the ``SAGA_OPENED`` it writes.
        max_clock_skew_s: the largest difference assumed between wall clocks of writers,
            brokers and takers (``SAGACITY_MAX_CLOCK_SKEW_S``, default 5).
        client: extra librdkafka settings for TLS/SASL and tuning, from
            ``SAGACITY_KAFKA_<KEY_WITH_UNDERSCORES>`` (``SAGACITY_KAFKA_SECURITY_PROTOCOL`` is
            ``security.protocol``). Settings the journal's guarantees rest on (``acks``,
            idempotence, the partitioner) are refused.
        read_index: where reads find sagas' archived prefixes (:class:`ReadIndexSettings`).
        writer_id: this writer's id on every event (``SAGACITY_WRITER_ID``; default
            ``host/pid/random``); stable when the archive registers writers.
        writer_registry: the writer registry file (``SAGACITY_WRITER_REGISTRY``, as the
            archive's): reads accept an event only from a registered writer whose signature
            verifies and who may write it there (docs/adr/0014 §4, §5).
        journal_name: the journal's name in signed decisions (``SAGACITY_JOURNAL_NAME``;
            default ``kafka:<cluster id>/<topic>``): a decision names the journal it was made
            on and counts on no other (docs/adr/0025-trust-model.md).
        writer_key: the writer's signing key file (``SAGACITY_WRITER_KEY``: an HMAC secret
            or an Ed25519 key, docs/adr/0014-signed-decisions-and-writers.md); ``None``:
            events are not signed (the default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    topic: str = Field(default=DEFAULT_TOPIC, min_length=1, max_length=249)
    ack_timeout_s: float = Field(default=10.0, gt=0, le=300)
    startup_timeout_s: float = Field(default=10.0, gt=0, le=300)
    read_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    lease_ttl_s: float = Field(default=60.0, gt=0, le=86_400)
    max_clock_skew_s: float = Field(default=5.0, ge=0, le=3600)
    client: Mapping[str, str] = Field(default_factory=dict)
    read_index: ReadIndexSettings = Field(default_factory=ReadIndexSettings)
    writer_id: str | None = None
    writer_key: str | None = None
    journal_name: str | None = Field(default=None, min_length=1, max_length=256)
    writer_registry: str | None = None

    @property
    def lease_margin_s(self) -> float:
        """How much earlier than the lease a writer stops appending unconfirmed.

        An event published just before the lease ends can still reach the broker later: it
        may wait for room in the producer's queue (up to the ack timeout) and then be in
        flight (up to the ack timeout again); one more second covers the acknowledgement
        wait's slack and the drift of the monotonic clock.
        """
        return 2 * self.ack_timeout_s + 1.0

    @model_validator(mode="after")
    def _lease_outlasts_margin(self) -> KafkaJournalSettings:
        if self.lease_ttl_s <= self.lease_margin_s:
            raise ValueError(
                f"lease_ttl_s ({self.lease_ttl_s:g}) must exceed twice ack_timeout_s plus one "
                f"second ({self.lease_margin_s:g}): a writer must be able to append within it"
            )
        return self

    @field_validator("topic")
    @classmethod
    def _legal_topic(cls, value: str) -> str:
        if value in {".", ".."} or not all(
            c.isascii() and (c.isalnum() or c in "._-") for c in value
        ):
            raise ValueError("a Kafka topic name uses only ASCII letters, digits, '.', '_' and '-'")
        return value

    @field_validator("client")
    @classmethod
    def _no_unsafe_overrides(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        unsafe = sorted(set(value) & _FIXED)
        if unsafe:
            raise ValueError(
                f"{', '.join(unsafe)} cannot be set: the journal fixes them for durability"
            )
        return dict(value)
