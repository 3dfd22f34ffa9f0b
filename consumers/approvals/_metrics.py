"""Prometheus exposition of the gate metrics, computed from the working table at scrape time.

Decision counts, the approve ratio and latency quantiles are over a window of decision times,
the same figures ``sagacity approvals stats`` prints.  The latency covers request journaled →
deciding event journaled; it does not measure when a person first looked at the request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from sagacity.ports import GateStats


class GateCollector(Collector):
    """Collects :class:`GateStats` (and the consumer's counters) on every scrape."""

    def __init__(
        self,
        stats: Callable[[], GateStats],
        consumer_counts: Callable[[], tuple[int, int, int]] | None = None,
        auth_state: Callable[[], tuple[int, int, bool]] | None = None,
    ) -> None:
        self._stats = stats
        self._consumer_counts = consumer_counts
        self._auth_state = auth_state

    def collect(self) -> Iterator[Metric]:
        figures = self._stats()
        window = GaugeMetricFamily(
            "sagacity_approvals_window_seconds", "The window the decision figures cover."
        )
        window.add_metric([], figures.window_s)
        yield window
        decisions = GaugeMetricFamily(
            "sagacity_approvals_decisions",
            "Requests decided in the window, by decision.",
            labels=["decision"],
        )
        for name, count in (
            ("approved", figures.approved),
            ("rejected", figures.rejected),
            ("expired", figures.expired),
        ):
            decisions.add_metric([name], count)
        yield decisions
        ratio = GaugeMetricFamily(
            "sagacity_approvals_approve_ratio",
            "approved / (approved + rejected) in the window (NaN without decisions).",
        )
        ratio.add_metric(
            [], figures.approve_ratio if figures.approve_ratio is not None else float("nan")
        )
        yield ratio
        latency = GaugeMetricFamily(
            "sagacity_approvals_decision_latency_seconds",
            "Request journaled to deciding event journaled, quantiles over the window "
            "(not time to first look).",
            labels=["quantile"],
        )
        for quantile, value in (("0.5", figures.latency_p50_s), ("0.95", figures.latency_p95_s)):
            latency.add_metric([quantile], value if value is not None else float("nan"))
        yield latency
        pending = GaugeMetricFamily(
            "sagacity_approvals_pending", "Open requests (waiting for a decision or a resume)."
        )
        pending.add_metric([], figures.pending)
        yield pending
        oldest = GaugeMetricFamily(
            "sagacity_approvals_oldest_pending_age_seconds",
            "Age of the oldest open request (0 when none).",
        )
        oldest.add_metric([], figures.oldest_pending_age_s or 0.0)
        yield oldest
        if self._consumer_counts is not None:
            applied, skipped, quarantined = self._consumer_counts()
            folded = CounterMetricFamily(
                "sagacity_approvals_consumer_events",
                "Journal events this replica folded into the table, skipped as undecodable, or "
                "quarantined (refused by the acceptance rule, a sealed field that cannot be "
                "opened, values the database refused).",
                labels=["outcome"],
            )
            folded.add_metric(["applied"], applied)
            folded.add_metric(["skipped"], skipped)
            folded.add_metric(["quarantined"], quarantined)
            yield folded
        if self._auth_state is not None:
            loaded, failed, ok = self._auth_state()
            reloads = CounterMetricFamily(
                "sagacity_approvals_auth_reloads",
                "Edits of the auth file since start-up, by whether they loaded.",
                labels=["outcome"],
            )
            reloads.add_metric(["loaded"], loaded)
            reloads.add_metric(["failed"], failed)
            yield reloads
            usable = GaugeMetricFamily(
                "sagacity_approvals_auth_file_ok",
                "1 while the auth file loads; 0 while decisions are refused because it does not.",
            )
            usable.add_metric([], 1.0 if ok else 0.0)
            yield usable


def exposition(collector: GateCollector) -> Callable[[], tuple[bytes, str]]:
    """A ``/metrics`` renderer over a registry of its own (not the process-global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    def render() -> tuple[bytes, str]:
        return generate_latest(registry), CONTENT_TYPE_LATEST

    return render
