"""The dead-letter topic on Kafka: poison input is parked there with its original bytes and a
reason (the services' ``DeadLetterTopic`` policy, ``sagacity.consumers._poison``, sends through
:class:`DeadLetters`, a :class:`~sagacity.ports.DeadLetterSender`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from sagacity.errors import JournalError, JournalUnavailableError
from sagacity.ports import Record
from sagacity.producer._clients import with_logger
from sagacity.producer._denied import access_denied

log = logging.getLogger("sagacity.consumer")

REASON_HEADER = "sagacity.dlq.reason"
DETAIL_HEADER = "sagacity.dlq.detail"
SOURCE_HEADERS = ("sagacity.dlq.topic", "sagacity.dlq.partition", "sagacity.dlq.offset")


def ensure_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int,
    timeout: float,
    client: Mapping[str, object] | None = None,
) -> None:
    """Create the dead-letter topic if it does not exist (never compacted: nothing is lost).

    ``client``: the admin's settings (its principal, named when Kafka refuses it).

    Raises:
        KafkaAccessDeniedError: the principal may not see or create the topic.
        JournalUnavailableError: the cluster refused or did not answer.
    """
    metadata = admin.list_topics(timeout=timeout)
    if name in metadata.topics and metadata.topics[name].error is None:
        return
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, config={"cleanup.policy": "delete"})],
        operation_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        doing = f"describing or creating dead-letter topic {name!r}"
        denied: JournalError | None = access_denied(exc, client or {}, doing=doing)
        raise (
            denied or JournalUnavailableError(f"cannot create dead-letter topic {name!r}: {exc}")
        ) from exc


def ensure_dead_letter_topic(
    config: Mapping[str, str | int | float | bool], name: str, *, timeout: float
) -> None:
    """:func:`ensure_topic` (one partition) through an admin client on ``config`` (the
    service's librdkafka settings, its principal named when Kafka refuses it)."""
    ensure_topic(
        AdminClient(with_logger(config)), name, partitions=1, timeout=timeout, client=config
    )


class DeadLetters:
    """Publishes poison messages to ``<topic>.dlq`` and waits for the broker's acknowledgement.

    Args:
        config: librdkafka settings (bootstrap servers, TLS/SASL).
        topic: the dead-letter topic.
        timeout_s: the longest one publication waits.
    """

    def __init__(
        self, config: Mapping[str, str | int | float | bool], topic: str, *, timeout_s: float = 10.0
    ) -> None:
        self.topic = topic
        self._timeout = timeout_s
        self._producer = Producer(
            with_logger({**config, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
        )

    def send(self, message: Record, *, reason: str, detail: str) -> None:
        """Park ``message`` (its key, value and headers unchanged) with ``reason``.

        Raises:
            JournalUnavailableError: the broker did not acknowledge in time (the caller keeps
                the message's offset uncommitted and tries again).
        """
        original = message.headers() or []
        items = original.items() if isinstance(original, Mapping) else original
        headers: list[tuple[str, str | bytes | None]] = list(items)
        headers += [
            (REASON_HEADER, reason.encode()),
            (DETAIL_HEADER, detail.encode("utf-8", "replace")),
            (SOURCE_HEADERS[0], (message.topic() or "").encode()),
            (SOURCE_HEADERS[1], str(message.partition()).encode()),
            (SOURCE_HEADERS[2], str(message.offset()).encode()),
        ]
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                errors.append(error)

        self._producer.produce(
            self.topic,
            key=message.key(),
            value=message.value(),
            headers=headers,
            on_delivery=delivered,
        )
        remaining = self._producer.flush(self._timeout)
        if remaining or errors:
            raise JournalUnavailableError(
                f"dead-letter topic {self.topic!r} did not acknowledge: "
                f"{errors[0] if errors else 'timed out'}"
            )
        log.warning(
            "dead-lettered: %s: %s",
            reason,
            detail,
            extra={"partition": message.partition(), "offset": message.offset(), "reason": reason},
        )

    def close(self) -> None:
        """Flush and release the producer."""
        self._producer.flush(self._timeout)
