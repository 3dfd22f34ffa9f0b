"""OpenTelemetry traces of sagas, tool calls, gates, decisions and undos (the ``otel`` extra).

``enable()`` makes spans with the application's tracer provider (the global one by default);
``configure_from_env(service_name)`` does so from the standard ``OTEL_*`` variables, as the
services and ``Sagacity.from_env()`` do; ``calling_tool(call_id)`` names the agent framework's
id of the call being made.  The spans and their attributes: docs/operations/tracing.md.
"""

from __future__ import annotations

from sagacity.telemetry._tracing import calling_tool, configure_from_env, disable, enable

__all__ = ["calling_tool", "configure_from_env", "disable", "enable"]
