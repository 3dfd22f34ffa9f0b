"""What every Kafka client Sagacity makes shares: librdkafka's log through Python logging, and a
bounded check that the broker answers.

librdkafka writes its own lines to stderr unless the client's ``logger`` setting is given; an
unreachable broker then repeats ``Connect … failed`` every reconnect backoff (tens of lines a
second).  :func:`with_logger` routes those lines to the ``sagacity.kafka`` logger, so they take
the service's log format, and repeats of one line are logged once a minute with their count.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from sagacity.errors import JournalUnavailableError

KAFKA_LOGGER = "sagacity.kafka"
REACHABLE_TIMEOUT_S = 8.0
"""How long a service waits for the broker at start before it reports it unreachable (with
the interpreter's start, within 10 s of the command)."""
_REPEAT_WINDOW_S = 60.0
_TIMINGS = re.compile(r"\d+ms\b")


class _LibrdkafkaLog:
    """The ``logger`` librdkafka calls (``log(level, fmt, *args)``): forwards to Python logging,
    a repeated line at most once per minute."""

    def __init__(self, name: str = KAFKA_LOGGER) -> None:
        self._logger = logging.getLogger(name)
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}

    def log(self, level: int, msg: str, *args: object) -> None:
        text = msg % args if args else msg
        key = _TIMINGS.sub("Nms", text)  # "(after 0ms in state CONNECT)" and "1ms" repeat
        now = time.monotonic()
        with self._lock:
            last, suppressed = self._seen.get(key, (-_REPEAT_WINDOW_S, 0))
            if now - last < _REPEAT_WINDOW_S:
                self._seen[key] = (last, suppressed + 1)
                return
            self._seen[key] = (now, 0)
            if len(self._seen) > 1000:
                self._seen = {key: (now, 0)}
        if suppressed:
            text = f"{text} (repeated {suppressed} times)"
        self._logger.log(level, "librdkafka: %s", text)


_SHARED = _LibrdkafkaLog()


def with_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with librdkafka's log routed to the ``sagacity.kafka`` logger."""
    return {**config, "logger": _SHARED}


def check_reachable(config: Mapping[str, Any], *, timeout: float = REACHABLE_TIMEOUT_S) -> None:
    """Return once the brokers in ``config`` answer a metadata request.

    Raises:
        JournalUnavailableError: no answer within ``timeout`` seconds (one line, naming the
            bootstrap servers).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    servers = config.get("bootstrap.servers", "?")
    admin = AdminClient(with_logger(config))
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise JournalUnavailableError(
            f"Kafka at {servers} is unreachable: no answer within {timeout:g} s "
            f"({exc.args[0].str() if exc.args else exc})"
        ) from exc
