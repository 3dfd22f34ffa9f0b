"""Who made an approval request, as the request's own entry on the chain says.

The identities are the ``caller`` attribute (the authenticated principal an MCP server or other
front journaled), the entry's ``actor`` and its ``writer`` attribute (the agent process's
writer identity).  They are what the request's writer put there: the approvals service uses
them to refuse a decision by the request's own maker (never to grant one), and the MCP server
to let only the request's opener resume it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry


def request_entry(entries: Iterable[JournalEntry], seq: int) -> JournalEntry | None:
    """The ``AWAITING_APPROVAL`` entry at ``seq`` of a saga's accepted chain, if there is one."""
    return next(
        (e for e in entries if e.seq == seq and e.event_type is EventType.AWAITING_APPROVAL),
        None,
    )


def caller_of(entry: JournalEntry) -> str | None:
    """The principal the request's call came from (``None``: none was journaled)."""
    caller = entry.attributes.get(attr.CALLER)
    return caller if caller else None


def requesters(entry: JournalEntry) -> frozenset[str]:
    """Every identity the request was made under: its caller, actor and writer."""
    names = (caller_of(entry), entry.actor, entry.attributes.get(attr.WRITER))
    return frozenset(n for n in names if n)
