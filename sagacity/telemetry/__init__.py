"""Telemetry: OpenTelemetry spans and the W3C trace context journal events carry."""
