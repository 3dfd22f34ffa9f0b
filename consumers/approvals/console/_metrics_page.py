"""The gate metrics page: per tool, over the windows of :mod:`._metrics`, of the tools the
viewer may read."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

from sagacity.consumers.approvals.console import _metrics
from sagacity.consumers.approvals.console._page import SEVEN_DAYS_US, Console, Viewer, page


def _figures(console: Console, viewer: Viewer) -> dict[str, Any]:
    now = console.now_us()
    rows = [
        r
        for r in console.service.store.decided(since_us=now - SEVEN_DAYS_US)
        if viewer.principal.may_read([r.tool])
    ]
    windows = []
    for label, seconds in _metrics.WINDOWS:
        tools = _metrics.figures(rows, now_us=now, window_s=seconds)
        windows.append({"label": label, "tools": tools, "chart": _metrics.chart(tools)})
    return {"windows": windows}


async def metrics_page(request: Request, console: Console, viewer: Viewer) -> Response:
    """Approve/reject ratio and decision times per tool."""
    context = await run_in_threadpool(_figures, console, viewer)
    return console.render(request, "metrics.html", viewer, **context)


router = Router(routes=[Route("/metrics", page(metrics_page), methods=["GET"])])
