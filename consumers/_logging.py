"""The services' one log format: JSON, one object per line on stderr, carrying the saga id.

Every service (approvals, compensation, archive) configures the root logger with
:func:`configure`, so its own lines, uvicorn's and librdkafka's (routed through the
``sagacity.kafka`` logger) share the format.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from sagacity._native import log_path_in_use

_FIELDS = ("saga_id", "partition", "offset", "seq", "status", "reason", "instance", "service")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the known extras."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def configure(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON (uvicorn's loggers included)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
        # A logging configuration applied earlier in the process (uvicorn's own, for one)
        # may have disabled it or raised its level; the root's level rules here.
        named.disabled = False
        named.setLevel(logging.NOTSET)


def log_hot_path() -> None:
    """Log, as a service starts serving (after its start-up checks), which hot path it runs:
    compiled, or Python with a warning naming the cost (:func:`sagacity._native.path_in_use`)."""
    log_path_in_use()
