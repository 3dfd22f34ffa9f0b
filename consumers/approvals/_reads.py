"""What a principal may read: a saga only if it decides one of the saga's tools, or audits.

The API's saga endpoint, the console's saga, attention and bundle pages and the request pages
ask :func:`check_readable`; a saga a principal may not read is answered exactly as an unknown
one (404), so its existence is not disclosed either.
"""

from __future__ import annotations

from collections.abc import Iterable

from sagacity.consumers.approvals._auth import Principal
from sagacity.entries._events import JournalEntry
from sagacity.errors import UnknownSagaError


def saga_tools(entries: Iterable[JournalEntry]) -> set[str]:
    """The tools a saga's chain names."""
    return {e.tool for e in entries if e.tool}


def may_read(principal: Principal, entries: Iterable[JournalEntry]) -> bool:
    """Whether ``principal`` sees the saga whose chain is ``entries``."""
    return principal.may_read(saga_tools(entries))


def check_readable(principal: Principal, saga_id: str, entries: Iterable[JournalEntry]) -> None:
    """Refuse a saga ``principal`` may not read, or one with no entries, alike.

    Raises:
        UnknownSagaError: no entries, or none of its tools is the principal's.
    """
    listed = list(entries)
    if not listed or not may_read(principal, listed):
        raise UnknownSagaError(
            f"unknown saga {saga_id!r} (or none of its tools is yours)", saga_id=saga_id
        )
