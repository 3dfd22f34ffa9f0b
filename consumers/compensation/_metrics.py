"""Prometheus metrics and the ``/healthz``, ``/readyz``, ``/metrics`` endpoints.

A small stdlib HTTP server serves the three paths; the metrics live in a registry of the
service's own, so several services (or tests) in one process do not collide.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class Metrics:
    """The compensation service's metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.steps = Counter(
            "sagacity_compensation_steps",
            "Compensation steps by outcome (compensated, error, timeout, suspect, dirty).",
            ["outcome"],
            registry=self.registry,
        )
        self.sagas = Counter(
            "sagacity_compensation_sagas",
            "Sagas whose compensation the service ended, by final status.",
            ["status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "sagacity_compensation_duration_seconds",
            "Time one undo call took.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.start_latency = Histogram(
            "sagacity_compensation_start_latency_seconds",
            "From COMPENSATION_REQUESTED recorded to the first undo call started.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "sagacity_compensation_dead_letters",
            "Messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.refused = Counter(
            "sagacity_compensation_requests_refused",
            "COMPENSATION_REQUESTED after a saga's end without a valid operator signature, "
            "by reason (each is dead-lettered, never acted on).",
            ["reason"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "sagacity_compensation_consumer_lag",
            "Messages on the journal topic not yet processed, by partition.",
            ["partition"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "sagacity_compensation_in_flight",
            "Sagas being compensated now.",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The metrics in Prometheus text format."""
        return generate_latest(self.registry)


class HealthServer:
    """Serves ``/healthz`` (alive), ``/readyz`` (ready for work) and ``/metrics``.

    Args:
        host / port: where to listen (port 0 picks a free port; see :attr:`port`).
        metrics: the metrics to expose.
        healthy / ready: return ``(ok, detail)``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: Metrics,
        healthy: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
                elif self.path in ("/healthz", "/readyz"):
                    ok, detail = (healthy if self.path == "/healthz" else ready)()
                    self._send(200 if ok else 503, (detail + "\n").encode(), "text/plain")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                del format, args  # probes every few seconds would drown the service's logs

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sagacity-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
