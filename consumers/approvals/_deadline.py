"""A request row's deadline as the approvals service shows and schedules it: the core's
deadline of the request (its own limit, the service's TTL from first sight) plus the operator
extensions the store's fold verified (:attr:`sagacity.ports.RequestRow.extended_by_us`).

The API, the console, the notices and the sweep's schedule read it; an expiry itself
re-derives the deadline from the chain (``Sagacity.approval_deadline_us`` given the saga's
entries), so a row that says more or less than the chain decides nothing.
"""

from __future__ import annotations

from sagacity.entries._bounds import INT64_MAX
from sagacity.ports import RequestRow
from sagacity.saga._saga import Sagacity


def row_deadline_us(sagacity: Sagacity, row: RequestRow) -> int | None:
    """When ``row``'s request lapses (``None``: never), with its verified extensions."""
    deadline = sagacity.approval_deadline_us(row.request(), seen_at_us=row.seen_at_us)
    if deadline is None:
        return None
    return min(deadline + max(row.extended_by_us, 0), INT64_MAX)
