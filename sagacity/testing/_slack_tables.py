"""In-memory :class:`~sagacity.ports.SlackTables`, for tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sagacity.ports._slack_tables import SlackMessage


@dataclass
class _Row:
    claimed_at_us: int
    channel: str | None = None
    ts: str | None = None
    settled: bool = False


class InMemorySlackTables:
    """The Slack tables in dicts (one process only)."""

    def __init__(self) -> None:
        self._messages: dict[tuple[str, int], _Row] = {}
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def migrate(self) -> None:
        """Nothing to create."""

    def claim(self, saga_id: str, seq: int, *, now_us: int) -> bool:
        """``False`` when already claimed."""
        with self._lock:
            if (saga_id, seq) in self._messages:
                return False
            self._messages[(saga_id, seq)] = _Row(claimed_at_us=now_us)
            return True

    def release(self, saga_id: str, seq: int) -> None:
        """Give up a claim with no message recorded."""
        with self._lock:
            row = self._messages.get((saga_id, seq))
            if row is not None and row.ts is None:
                del self._messages[(saga_id, seq)]

    def posted(self, saga_id: str, seq: int, *, channel: str, ts: str) -> None:
        """Record where the request's message is."""
        with self._lock:
            row = self._messages.get((saga_id, seq))
            if row is not None:
                row.channel, row.ts = channel, ts

    def message(self, saga_id: str, seq: int) -> SlackMessage | None:
        """The request's message, if it was posted."""
        with self._lock:
            row = self._messages.get((saga_id, seq))
            return None if row is None else _message(saga_id, seq, row)

    def unsettled(self, limit: int = 500) -> list[SlackMessage]:
        """Posted messages not yet settled, oldest claim first."""
        with self._lock:
            rows = sorted(
                (row.claimed_at_us, key, row)
                for key, row in self._messages.items()
                if not row.settled and row.ts is not None
            )
            found = [_message(key[0], key[1], row) for _, key, row in rows]
        return [m for m in found if m is not None][:limit]

    def settle(self, saga_id: str, seq: int) -> None:
        """Mark the request's message as settled."""
        with self._lock:
            row = self._messages.get((saga_id, seq))
            if row is not None:
                row.settled = True

    def first_sight(self, signature: str, *, request_ts: int, now_us: int, keep_s: int) -> bool:
        """``False`` when ``signature`` was seen before (and not yet forgotten)."""
        with self._lock:
            horizon = now_us // 1_000_000 - keep_s
            for old in [s for s, ts in self._seen.items() if ts < horizon]:
                del self._seen[old]
            if signature in self._seen:
                return False
            self._seen[signature] = request_ts
            return True


def _message(saga_id: str, seq: int, row: _Row) -> SlackMessage | None:
    if row.ts is None or row.channel is None:
        return None
    return SlackMessage(saga_id=saga_id, seq=seq, channel=row.channel, ts=row.ts)
