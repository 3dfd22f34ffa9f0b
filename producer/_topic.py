"""The journal topic: creation with audit-safe settings, and the checks every writer runs.

See docs/adr/0008-topic.md for the choices (delete, never compact; retention; replication).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

# ConfigResource and NewTopic are re-exported without an __all__, which strict mypy ignores.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from sagacity.config import _duration
from sagacity.errors import (
    JournalError,
    JournalUnavailableError,
    TopicConfigError,
    TopicNotFoundError,
)
from sagacity.producer._clients import kafka_reason
from sagacity.producer._denied import access_denied

ClientConfig = dict[str, str | int | float | bool]
"""librdkafka settings as confluent-kafka's clients take them."""

DAY_MS = 24 * 60 * 60 * 1000
MIN_RETENTION_MS = 183 * DAY_MS
"""Six months (EU AI Act Art. 19 asks logs to be kept at least this long)."""
DEFAULT_RETENTION_MS = 400 * DAY_MS
"""An audit year plus margin; the Postgres archive is the long-term store."""
DEFAULT_PARTITIONS = 12
MISSING_TOPIC_GRACE_S = 3.0
"""How long a topic missing from metadata is looked for again (creation propagates)."""
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes`` (the producer's own limit)."""


def parse_retention(text: str) -> int:
    """``"400d"``, ``"13mo"`` (30-day months), ``"2y"`` (365 days) or ``"infinite"`` (``-1``),
    as milliseconds.  ``"13m"`` is refused as ambiguous (``m`` is minutes).

    Raises:
        DurationError: the text is none of these (a ``ValueError``).
    """
    if text.strip().lower() in {"infinite", "forever", "-1"}:
        return -1
    return int(_duration.parse_retention(text).seconds * 1000)


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    """How the journal topic is created.

    Attributes:
        partitions: the number of partitions (fixed for the topic's life: a saga's events
            must stay in one partition, and adding partitions moves keys).
        replication_factor: copies of each partition; ``None`` picks ``min(3, brokers)``.
        min_insync_replicas: copies that must have an event before it is acknowledged;
            ``None`` picks ``replication_factor - 1`` (at least 1).
        retention_ms: how long events stay on the topic (``-1`` forever).
    """

    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    retention_ms: int = DEFAULT_RETENTION_MS


@dataclass(frozen=True, kw_only=True)
class TopicInfo:
    """What the broker says about the journal topic.

    Attributes:
        name: the topic.
        partitions: its partition count.
        replication_factor: replicas of partition 0.
        config: its effective configuration.
        brokers: the number of brokers in the cluster.
        cluster_id: the cluster's id (``None`` when the broker did not say).
    """

    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)
    brokers: int = 1
    cluster_id: str | None = None

    @property
    def compacted(self) -> bool:
        """The topic compacts its log (which would erase history)."""
        policy = self.config.get("cleanup.policy", "delete")
        return "compact" in [p.strip() for p in policy.split(",")]

    @property
    def max_message_bytes(self) -> int:
        """The topic's largest accepted record batch, in bytes."""
        return int(self.config.get("max.message.bytes", "1048588"))


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One result of :func:`check`.

    Attributes:
        setting: the setting concerned.
        value: its current value.
        ok: whether it is safe for evidence.
        fatal: writers refuse to start (only for a compacted topic).
        detail: what it means and what to do.
    """

    setting: str
    value: str
    ok: bool
    detail: str
    fatal: bool = False


def compaction_refusal(topic: str) -> str:
    """Why writers refuse a compacted topic (the text of the error)."""
    return (
        f"topic {topic!r} has cleanup.policy=compact: compaction keeps only the newest event "
        "of each key, and the key is the saga id, so it would erase every saga's history but "
        "its last event and break every chain. Recreate the topic with `sagacity topic create` "
        "(cleanup.policy=delete) and move the events over."
    )


def check(info: TopicInfo) -> list[Finding]:
    """Every setting of ``info`` that bears on keeping evidence, each judged."""
    cfg = info.config
    out = [
        Finding(
            setting="cleanup.policy",
            value=cfg.get("cleanup.policy", "delete"),
            ok=not info.compacted,
            fatal=info.compacted,
            detail=compaction_refusal(info.name) if info.compacted else "delete: history kept",
        )
    ]
    retention = int(cfg.get("retention.ms", str(7 * DAY_MS)))
    short = retention != -1 and retention < MIN_RETENTION_MS
    out.append(
        Finding(
            setting="retention.ms",
            value=str(retention),
            ok=not short,
            detail=(
                f"{retention / DAY_MS:.0f} days is shorter than six months: events may be deleted "
                "before the archive is the only copy auditors need"
                if short
                else ("infinite" if retention == -1 else f"{retention / DAY_MS:.0f} days")
            ),
        )
    )
    size = int(cfg.get("retention.bytes", "-1"))
    out.append(
        Finding(
            setting="retention.bytes",
            value=str(size),
            ok=size == -1,
            detail="unbounded" if size == -1 else "size-based deletion can drop evidence early",
        )
    )
    min_isr = int(cfg.get("min.insync.replicas", "1"))
    wanted = max(1, min(info.replication_factor - 1, 2))
    out.append(
        Finding(
            setting="min.insync.replicas",
            value=str(min_isr),
            ok=min_isr >= wanted,
            detail=(
                f"acknowledged events exist on at least {min_isr} replica(s) "
                f"of {info.replication_factor}"
            )
            if min_isr >= wanted
            else f"with {info.replication_factor} replicas, use at least {wanted}",
        )
    )
    wanted_rf = min(3, info.brokers)
    out.append(
        Finding(
            setting="replication.factor",
            value=str(info.replication_factor),
            ok=info.replication_factor >= wanted_rf,
            detail=f"{info.brokers} broker(s) in the cluster"
            if info.replication_factor >= wanted_rf
            else f"the cluster has {info.brokers} brokers: replicate at least {wanted_rf} times",
        )
    )
    unclean = cfg.get("unclean.leader.election.enable", "false")
    out.append(
        Finding(
            setting="unclean.leader.election.enable",
            value=unclean,
            ok=unclean == "false",
            detail="an out-of-sync replica never becomes leader"
            if unclean == "false"
            else "an out-of-sync replica may become leader and drop acknowledged events",
        )
    )
    return out


def _unavailable(
    bootstrap: str, exc: BaseException, *, principal: str | None = None, doing: str = ""
) -> JournalError:
    client = {"bootstrap.servers": bootstrap, "sasl.username": principal}
    error: JournalError | None = access_denied(exc, client, doing=doing or "its request")
    if error is None:
        error = JournalUnavailableError(f"cannot reach Kafka at {bootstrap}: {kafka_reason(exc)}")
    error.__cause__ = exc
    return error


def describe(
    admin: AdminClient,
    topic: str,
    *,
    bootstrap: str,
    timeout: float,
    principal: str | None = None,
) -> TopicInfo:
    """The broker's view of ``topic`` (``principal``: the SASL user the client connects as,
    named when Kafka refuses it).

    Raises:
        TopicNotFoundError: the topic does not exist.
        KafkaAccessDeniedError: Kafka refused the principal (an ACL it lacks).
        JournalUnavailableError: the cluster did not answer within ``timeout``.
    """
    doing = f"describing topic {topic!r}"
    # Asking for one topic by name would let a broker with auto.create.topics.enable create
    # it with default (unsafe) settings; list all instead.  A topic created a moment ago may
    # not be in every broker's metadata yet, so a missing one is looked for again briefly.
    settle = time.monotonic() + min(timeout, MISSING_TOPIC_GRACE_S)
    while True:
        try:
            metadata = admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise _unavailable(bootstrap, exc, principal=principal, doing=doing) from exc
        meta = metadata.topics.get(topic)
        if meta is not None or time.monotonic() >= settle:
            break
        time.sleep(0.1)
    if meta is None or (
        meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise TopicNotFoundError(
            f"topic {topic!r} does not exist on {bootstrap}: create it with "
            f"`sagacity topic create --topic {topic}`",
            topic=topic,
        )
    if meta.error is not None:
        raise _unavailable(bootstrap, KafkaException(meta.error), principal=principal, doing=doing)
    if not meta.partitions:
        raise _unavailable(bootstrap, RuntimeError(f"topic {topic!r} has no partition leader"))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as exc:
        raise _unavailable(
            bootstrap, exc, principal=principal, doing=f"reading topic {topic!r}'s settings"
        ) from exc
    except TimeoutError as exc:
        raise _unavailable(bootstrap, exc) from exc
    first = meta.partitions[min(meta.partitions)]
    return TopicInfo(
        name=topic,
        partitions=len(meta.partitions),
        replication_factor=len(first.replicas),
        config={name: (e.value if e.value is not None else "") for name, e in entries.items()},
        brokers=max(1, len(metadata.brokers)),
        cluster_id=metadata.cluster_id,
    )


def journal_identity(cluster_id: str | None, topic: str, *, name: str | None = None) -> str:
    """The journal's identity: its configured ``name`` (``SAGACITY_JOURNAL_NAME``), else
    ``kafka:<cluster id>/<topic>``.  Two clusters, or two topics of one, are two journals: a
    signed decision names the journal it was made on and counts on no other, and the stores
    several journals may share (compensation claims) key their rows by it.  The one place
    the identity is made (docs/adr/0025-trust-model.md)."""
    return name or f"kafka:{cluster_id or 'unknown-cluster'}/{topic}"


def create(
    admin: AdminClient, topic: str, spec: TopicSpec, *, bootstrap: str, timeout: float
) -> TopicInfo:
    """Create ``topic`` for the journal and return its description.

    Raises:
        TopicConfigError: the topic exists already, or the broker refused the settings.
        JournalUnavailableError: the cluster did not answer within ``timeout``.
    """
    try:
        brokers = max(1, len(admin.list_topics(timeout=timeout).brokers))
    except KafkaException as exc:
        raise _unavailable(bootstrap, exc) from exc
    rf = spec.replication_factor or min(3, brokers)
    min_isr = spec.min_insync_replicas or max(1, rf - 1)
    if min_isr > rf:
        raise TopicConfigError(
            f"min.insync.replicas={min_isr} exceeds replication factor {rf}: every write "
            "would be refused",
            topic=topic,
        )
    config = {
        "cleanup.policy": "delete",
        "retention.ms": str(spec.retention_ms),
        "retention.bytes": "-1",
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "message.timestamp.type": "CreateTime",
    }
    new = NewTopic(topic, num_partitions=spec.partitions, replication_factor=rf, config=config)
    try:
        admin.create_topics([new], request_timeout=timeout)[topic].result(timeout=timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicConfigError(
                f"topic {topic!r} already exists: run `sagacity topic check --topic {topic}`",
                topic=topic,
            ) from exc
        if isinstance(err, KafkaError) and err.code() in (
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
            KafkaError._ALL_BROKERS_DOWN,
        ):
            raise _unavailable(bootstrap, exc) from exc
        raise TopicConfigError(f"the broker refused topic {topic!r}: {exc}", topic=topic) from exc
    except TimeoutError as exc:
        raise _unavailable(bootstrap, exc) from exc
    return describe(admin, topic, bootstrap=bootstrap, timeout=timeout)
