"""W3C trace context for journal events: a ``traceparent`` header when the caller has one.

The core owns it (:mod:`sagacity.telemetry._tracing` sets it for the span it makes current); the
Kafka journal reads it for each event it produces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")

current_traceparent: ContextVar[str | None] = ContextVar("sagacity_traceparent", default=None)
"""The W3C ``traceparent`` of the caller's current span, if any (set it with :func:`traced`)."""


def valid_traceparent(value: str | None) -> str | None:
    """``value`` when it is a well-formed W3C ``traceparent``, else ``None`` (never sent)."""
    if value is None:
        return None
    value = value.strip().lower()
    if not _TRACEPARENT.match(value) or value.startswith("ff-"):
        return None
    _, trace_id, span_id, _ = value.split("-")
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return value


@contextmanager
def traced(traceparent: str | None) -> Iterator[None]:
    """Within the block, journal events carry ``traceparent`` as a Kafka header."""
    token = current_traceparent.set(traceparent)
    try:
        yield
    finally:
        current_traceparent.reset(token)
