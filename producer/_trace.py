"""W3C trace context for journal events (defined by the core:
:mod:`sagacity.telemetry._traceparent`)."""

from __future__ import annotations

from sagacity.telemetry._traceparent import current_traceparent, traced, valid_traceparent

__all__ = ["current_traceparent", "traced", "valid_traceparent"]
