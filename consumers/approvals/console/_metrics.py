"""Gate metrics per tool for the console: approve/reject ratio and request-to-decision time,
over 24 hours and 7 days, with a small server-rendered SVG chart (no script)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from sagacity.ports import RequestRow

WINDOWS = (("24 h", 86_400), ("7 days", 7 * 86_400))


@dataclass(frozen=True, kw_only=True)
class ToolFigures:
    """One tool's decisions in one window."""

    tool: str
    approved: int
    rejected: int
    expired: int
    p50_s: float | None
    p95_s: float | None

    @property
    def approve_ratio(self) -> float | None:
        """Approved / (approved + rejected), ``None`` without decisions."""
        decided = self.approved + self.rejected
        return self.approved / decided if decided else None


def _percentile(values: Sequence[float], fraction: float) -> float | None:
    """Linear-interpolated percentile (as PostgreSQL's ``percentile_cont``)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def figures(rows: Sequence[RequestRow], *, now_us: int, window_s: int) -> list[ToolFigures]:
    """Per-tool figures for requests decided in the last ``window_s`` seconds, by tool name."""
    since = now_us - window_s * 1_000_000
    by_tool: dict[str, list[RequestRow]] = {}
    for row in rows:
        if row.decided_at_us is not None and row.decided_at_us >= since:
            by_tool.setdefault(row.tool, []).append(row)
    out = []
    for tool, decided in sorted(by_tool.items()):
        latencies = [
            (r.decided_at_us - r.requested_at_us) / 1e6
            for r in decided
            if r.decided_at_us is not None and r.decision in ("approved", "rejected")
        ]
        out.append(
            ToolFigures(
                tool=tool,
                approved=sum(1 for r in decided if r.decision == "approved"),
                rejected=sum(1 for r in decided if r.decision == "rejected"),
                expired=sum(1 for r in decided if r.decision == "expired"),
                p50_s=_percentile(latencies, 0.5),
                p95_s=_percentile(latencies, 0.95),
            )
        )
    return out


def chart(tools: Sequence[ToolFigures]) -> str:
    """A horizontal stacked bar per tool (approved, rejected, expired) as inline SVG markup.

    Tool names are escaped: they come from the journal.
    """
    bar_w, row_h, label_w = 360, 22, 180
    height = max(1, len(tools)) * row_h + 30
    most = max((t.approved + t.rejected + t.expired for t in tools), default=0) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{label_w + bar_w + 60}" '
        f'height="{height}" role="img" aria-label="decisions per tool">'
    ]
    for index, figure in enumerate(tools):
        y = index * row_h + 4
        parts.append(f'<text x="0" y="{y + 14}" class="label">{escape(figure.tool[:28])}</text>')
        x = float(label_w)
        for count, css in (
            (figure.approved, "approved"),
            (figure.rejected, "rejected"),
            (figure.expired, "expired"),
        ):
            width = bar_w * count / most
            if width:
                parts.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="16" class="{css}">'
                    f"<title>{css}: {count}</title></rect>"
                )
            x += width
        total = figure.approved + figure.rejected + figure.expired
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 14}" class="count">{total}</text>')
    legend_y = height - 8
    for offset, css in ((0, "approved"), (110, "rejected"), (220, "expired")):
        parts.append(
            f'<rect x="{label_w + offset}" y="{legend_y - 10}" width="10" height="10" '
            f'class="{css}"></rect><text x="{label_w + offset + 14}" y="{legend_y}" '
            f'class="label">{css}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
