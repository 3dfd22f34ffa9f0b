"""What every Kafka client Sagacity makes shares: librdkafka's log through Python logging, and a
bounded check that the broker answers.

librdkafka writes its own lines to stderr unless the client's ``logger`` setting is given; an
unreachable broker then repeats ``Connect … failed`` every reconnect backoff (tens of lines a
second).  :func:`with_logger` routes those lines to the ``sagacity.kafka`` logger, so they take
the service's log format, and repeats of one line are logged once a minute with their count.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from sagacity.errors import JournalUnavailableError, KafkaAccessDeniedError
from sagacity.producer._denied import access_denied

KAFKA_LOGGER = "sagacity.kafka"
# librdkafka's lines go where the process's logging sends them (a service's JSON lines), and
# nowhere when it sends them nowhere: a command or an agent without logging configured says
# what failed in its own error, not in Python's last-resort copy of each line on stderr.
logging.getLogger(KAFKA_LOGGER).addHandler(logging.NullHandler())
REACHABLE_TIMEOUT_S = 8.0
"""How long a service waits for the broker before it reports it unreachable, counted from the
process's start (:func:`startup_timeout`): the report comes within 10 s of the command, however
long a loaded machine takes to start the interpreter and import the service."""
MIN_REACHABLE_TIMEOUT_S = 2.0
"""The least a broker is given to answer, however late in the start-up the check begins."""
_REPEAT_WINDOW_S = 60.0
_TIMINGS = re.compile(r"\d+ms\b")
_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")


class _LibrdkafkaLog:
    """The ``logger`` librdkafka calls (``log(level, fmt, *args)``): forwards to Python logging,
    a repeated line at most once per minute."""

    def __init__(self, name: str = KAFKA_LOGGER) -> None:
        self._logger = logging.getLogger(name)
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}

    def log(self, level: int, msg: str, *args: object) -> None:
        text = msg % args if args else msg
        # "(after 0ms in state CONNECT)", "1ms" and librdkafka's own ", 3 identical error(s)
        # suppressed" vary between repeats of one line.
        key = _SUPPRESSED.sub("", _TIMINGS.sub("Nms", text))
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


def process_age() -> float | None:
    """Seconds since this process started (Linux's ``/proc``), or ``None`` where unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:  # noqa: PTH123 - a proc file
            fields = stat.read().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime: ticks since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def startup_timeout(budget: float = REACHABLE_TIMEOUT_S) -> float:
    """The time left of ``budget`` seconds counted from the process's start (at least
    :data:`MIN_REACHABLE_TIMEOUT_S`); the whole ``budget`` where the start is unknown.

    A command checking the broker after its start-up would otherwise add that start-up (the
    interpreter, the service's imports: seconds on a loaded machine) to the wait.
    """
    age = process_age()
    if age is None:
        return budget
    return max(MIN_REACHABLE_TIMEOUT_S, budget - age)


def kafka_reason(exc: BaseException | object) -> str:
    """What librdkafka says went wrong, as a sentence: a ``KafkaException``'s (or a
    ``KafkaError``'s) text without its ``KafkaError{code=…,val=…}`` framing."""
    error = exc.args[0] if isinstance(exc, BaseException) and exc.args else exc
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(exc)


def topic_unreadable(
    topic: str, bootstrap: object, why: BaseException | str
) -> JournalUnavailableError:
    """The one line a reader of ``topic`` stops with when Kafka does not serve it."""
    reason = why if isinstance(why, str) else kafka_reason(why)
    return JournalUnavailableError(
        f"cannot read topic {topic!r} from Kafka at {bootstrap}: {reason}"
    )


def _unreachable(
    config: Mapping[str, Any], timeout: float, exc: Exception
) -> JournalUnavailableError | KafkaAccessDeniedError:
    denied = access_denied(exc, config, doing="reading the cluster's metadata")
    if denied is not None:
        return denied
    servers = config.get("bootstrap.servers", "?")
    reason = kafka_reason(exc)
    return JournalUnavailableError(
        f"Kafka at {servers} is unreachable: no answer within {timeout:.3g} s ({reason})"
    )


def check_reachable(config: Mapping[str, Any], *, timeout: float = REACHABLE_TIMEOUT_S) -> None:
    """Return once the brokers in ``config`` answer a metadata request.

    Raises:
        JournalUnavailableError: no answer within ``timeout`` seconds (one line, naming the
            bootstrap servers).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(with_logger(config))
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(config, timeout, exc) from exc


def cluster_id(config: Mapping[str, Any], *, timeout: float = REACHABLE_TIMEOUT_S) -> str:
    """The id of the Kafka cluster the brokers in ``config`` belong to (its metadata's
    ``cluster_id``, fixed when the cluster was formatted).

    Raises:
        JournalUnavailableError: no answer within ``timeout`` seconds, or the cluster reports
            no id (a broker too old to have one).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    servers = config.get("bootstrap.servers", "?")
    admin = AdminClient(with_logger(config))
    try:
        found: str | None = admin.list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise _unreachable(config, timeout, exc) from exc
    if not found:
        raise JournalUnavailableError(f"Kafka at {servers} reports no cluster id")
    return str(found)


class BrokerCheck:
    """:func:`check_reachable` started now, in the background, and reported by :meth:`result`.

    A command starts it as soon as it knows the brokers, goes on starting (imports, settings,
    the service object) while the metadata request is under way, and asks for the result where
    it needs the broker; the deadline is :func:`startup_timeout`'s, counted from the process's
    start, so an unreachable broker is reported within 10 s of the command however the start-up
    went.

    Args:
        config: librdkafka settings with ``bootstrap.servers``.
        timeout: the longest the check waits (default: :func:`startup_timeout`).
    """

    def __init__(self, config: Mapping[str, Any], *, timeout: float | None = None) -> None:
        self._config = dict(config)
        self.timeout = startup_timeout() if timeout is None else timeout
        self._error: JournalUnavailableError | KafkaAccessDeniedError | None = None
        self._thread = threading.Thread(target=self._run, name="sagacity-broker-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            check_reachable(self._config, timeout=self.timeout)
        except (JournalUnavailableError, KafkaAccessDeniedError) as exc:
            self._error = exc

    def result(self) -> None:
        """Return once the brokers answered.

        Raises:
            JournalUnavailableError: they did not answer within :attr:`timeout` (one line).
        """
        # The request itself is bounded by the timeout; the margin covers a loaded machine's
        # scheduling of the thread.
        self._thread.join(self.timeout + 5.0)
        if self._error is not None:
            raise self._error
        if self._thread.is_alive():
            servers = self._config.get("bootstrap.servers", "?")
            raise JournalUnavailableError(
                f"Kafka at {servers} is unreachable: no answer within {self.timeout:.3g} s"
            )
