"""What the approvals service's Slack integration keeps, shared by every replica:
:class:`SlackTables`.

One message per request posted (claimed before the post, so two replicas never post the same
request twice), with its channel and ``ts`` once Slack answered and whether it has been
rewritten with the request's outcome; and the signature of every interactivity body accepted
in the last minutes, so a replayed body is refused on any replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class SlackMessage:
    """A request's message in Slack."""

    saga_id: str
    seq: int
    channel: str
    ts: str


@runtime_checkable
class SlackTables(Protocol):
    """Where the Slack integration keeps its messages and the signatures it has seen."""

    def migrate(self) -> None:
        """Create the tables if they do not exist (safe on every start)."""
        ...

    def claim(self, saga_id: str, seq: int, *, now_us: int) -> bool:
        """Claim the posting of the request at ``saga_id``/``seq``; ``False``: already claimed."""
        ...

    def release(self, saga_id: str, seq: int) -> None:
        """Give up a claim whose post failed (none recorded yet), so a later scan posts again."""
        ...

    def posted(self, saga_id: str, seq: int, *, channel: str, ts: str) -> None:
        """Record where the request's message is."""
        ...

    def message(self, saga_id: str, seq: int) -> SlackMessage | None:
        """The request's message, if it was posted."""
        ...

    def unsettled(self, limit: int = 500) -> list[SlackMessage]:
        """Messages not yet rewritten with their request's outcome, oldest claim first."""
        ...

    def settle(self, saga_id: str, seq: int) -> None:
        """Mark the request's message as rewritten with its outcome."""
        ...

    def first_sight(self, signature: str, *, request_ts: int, now_us: int, keep_s: int) -> bool:
        """Record an accepted body's signature; ``False`` when it was seen before (a replay).
        Signatures whose ``request_ts`` is older than ``keep_s`` before ``now_us`` are
        forgotten first."""
        ...
