"""A journal held in process memory: for tests, examples and single-process use."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

from sagacity.chain import link
from sagacity.entries._events import GENESIS_HASH, EntryDraft, JournalEntry
from sagacity.errors import JournalUnavailableError, TailMovedError
from sagacity.gate._requests import pending_requests
from sagacity.journal import ApprovalRequest
from sagacity.privacy._redaction import refuse_in_form_1
from sagacity.tools._codec import check_json_payload


class InMemoryJournal:
    """The :class:`~sagacity.Journal` port in memory; safe under threads and asyncio.

    Appends to every saga are serialised by one lock, so each chain is totally ordered and no
    append is lost.  Entries are durable as soon as :meth:`append` returns (for the lifetime
    of the process), so :meth:`flush` has nothing to wait for.
    """

    def __init__(self, *, identity: str | None = None) -> None:
        self.identity = identity or f"memory:{uuid.uuid4().hex}"
        """The journal's name in signed decisions (a decision made on it counts on no other
        journal)."""
        self._chains: dict[str, list[JournalEntry]] = {}
        self._lock = threading.RLock()
        self._closed = False

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """Link ``draft`` to the tail of its saga's chain.

        Raises:
            JournalUnavailableError: the journal was closed.
            SerializationError: an ``INTENT`` / ``AWAITING_APPROVAL`` payload is not JSON, or
                the draft has redacted fields (their salts need chain form 2).
        """
        with self._lock:
            if self._closed:
                raise JournalUnavailableError(
                    "the in-memory journal is closed", saga_id=draft.saga_id
                )
            check_json_payload(draft)
            refuse_in_form_1(draft)  # this journal writes form 1 only: redacted salts stay out
            chain = self._chains.setdefault(draft.saga_id, [])
            prev = chain[-1].hash if chain else GENESIS_HASH
            entry = link(draft, seq=len(chain) + 1, prev_hash=prev)
            chain.append(entry)
            return entry

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        """:meth:`append` only if the saga's last seq is ``after_seq`` (compare-and-append).

        Raises:
            TailMovedError: the chain has grown past ``after_seq``; nothing was appended.
            JournalUnavailableError: the journal was closed.
            SerializationError: an ``INTENT`` / ``AWAITING_APPROVAL`` payload is not JSON.
        """
        check_json_payload(draft)
        with self._lock:
            current = len(self._chains.get(draft.saga_id, ()))
            if current != after_seq:
                raise TailMovedError(
                    f"saga {draft.saga_id!r} has {current} entries, not {after_seq}: it changed "
                    "since it was read",
                    saga_id=draft.saga_id,
                    seq=current,
                )
            return self.append(draft, durable=durable)

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """:meth:`append`; it never waits on I/O, so it does not block the loop."""
        return self.append(draft, durable=durable)

    def flush(self, timeout: float | None = None) -> None:
        """Nothing to wait for: every append is complete when it returns."""

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's chain in seq order (a snapshot; empty when the saga is unknown)."""
        with self._lock:
            return tuple(self._chains.get(saga_id, ()))

    def saga_ids(self) -> tuple[str, ...]:
        """Every saga with at least one entry, sorted."""
        with self._lock:
            return tuple(sorted(self._chains))

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Open approval requests derived from the chains, by saga then seq."""
        with self._lock:
            chains = (
                [self._chains.get(saga_id, [])]
                if saga_id is not None
                else [self._chains[s] for s in sorted(self._chains)]
            )
            snapshot = [tuple(chain) for chain in chains]
        return [request for chain in snapshot for request in pending_requests(chain)]

    def close(self) -> None:
        """Refuse further appends; entries stay readable."""
        with self._lock:
            self._closed = True
