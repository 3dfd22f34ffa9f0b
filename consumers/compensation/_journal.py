"""The journal the service compensates through: the Kafka journal, guarded by ownership.

Before every write that starts something (a ``COMPENSATION_INTENT``, a ``SUSPECT``, a
``SAGA_ENDED``) it asks the service whether this instance still owns the saga's partition and is
not stopping; if not, :class:`Revoked` stops the run there.  The outcome of a step already in
flight is always written: the rebalance waits for it (see the service's ``on_revoke``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sagacity.consumers.compensation import _failpoints
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.entries._memory import InMemoryJournal
from sagacity.journal import ApprovalRequest, ConditionalJournal, Journal

_OUTCOMES = frozenset({EventType.COMPENSATED, EventType.COMPENSATION_FAILED})


class Revoked(Exception):  # noqa: N818 - a flow signal, not an error
    """This instance may no longer write the saga (partition revoked, or shutting down)."""


class ServiceJournal:
    """A :class:`~sagacity.Journal` delegating to ``inner``, with the service's guard.

    Args:
        inner: returns the journal to write through (the service gives each worker thread a
            Kafka journal of its own, so partition reads run in parallel).
        may_write: ``may_write(saga_id)`` is ``True`` while this instance may start a step.
        on_append: told about every entry written.
        seals: the inner journals seal data fields (they have a key service).
    """

    def __init__(
        self,
        inner: Callable[[], Journal],
        *,
        may_write: Callable[[str], bool],
        on_append: Callable[[JournalEntry], None] | None = None,
        seals: bool = False,
    ) -> None:
        self.seals = seals
        """Whether the inner journals seal (a key service): a tool that redacts needs it."""
        self._inner = inner
        self._may_write = may_write
        self._on_append = on_append
        self._in_flight: dict[str, int] = {}
        self._preloaded: dict[str, Sequence[JournalEntry]] = {}

    @property
    def inner(self) -> Journal:
        """The journal this thread writes through."""
        return self._inner()

    @property
    def identity(self) -> str | None:
        """The inner journal's name in signed decisions (settlements verify against it)."""
        identity = getattr(self._inner(), "identity", None)
        return identity if isinstance(identity, str) else None

    def preload(self, saga_id: str, entries: Sequence[JournalEntry]) -> None:
        """Serve ``entries`` for the next :meth:`entries` call on ``saga_id`` (just read)."""
        self._preloaded[saga_id] = entries

    def _finishes_step(self, draft: EntryDraft) -> bool:
        ref = draft.attributes.get("ref_seq")
        return (
            draft.event_type in _OUTCOMES
            and ref is not None
            and (self._in_flight.get(draft.saga_id) == int(ref))
        )

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """Write ``draft`` durably, unless this instance may no longer start a step.

        Raises:
            Revoked: the saga's partition was revoked, or the service is stopping.
        """
        finishing = self._finishes_step(draft)
        if not finishing and not self._may_write(draft.saga_id):
            raise Revoked(f"no longer the owner of saga {draft.saga_id!r}")
        entry = self._inner().append(draft, durable=True)
        self._appended(draft, entry, finishing=finishing)
        return entry

    def _appended(self, draft: EntryDraft, entry: JournalEntry, *, finishing: bool) -> None:
        if draft.event_type is EventType.COMPENSATION_INTENT and entry.ref_seq is not None:
            self._in_flight[draft.saga_id] = entry.ref_seq
        elif finishing:
            self._in_flight.pop(draft.saga_id, None)
        if self._on_append is not None:
            self._on_append(entry)
        if finishing:
            _failpoints.reach("after_outcome")

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        """:meth:`append` only onto a chain whose last seq is ``after_seq``.

        The runner starts each step this way, so a chain another writer extended since it was
        read stops the run before it acts (the service then reads it again).

        Raises:
            Revoked: as :meth:`append`.
            TailMovedError: the chain moved; nothing was appended.
        """
        if not self._may_write(draft.saga_id):
            raise Revoked(f"no longer the owner of saga {draft.saga_id!r}")
        inner = self._inner()
        if not isinstance(inner, ConditionalJournal):
            return self.append(draft, durable=durable)
        entry = inner.append_after(draft, after_seq=after_seq, durable=True)
        self._appended(draft, entry, finishing=False)
        return entry

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """:meth:`append` (the service runs compensations on threads)."""
        return self.append(draft, durable=durable)

    def flush(self, timeout: float | None = None) -> None:
        """Flush the inner journal."""
        self._inner().flush(timeout)

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The preloaded chain once, else the inner journal's."""
        preloaded = self._preloaded.pop(saga_id, None)
        if preloaded is not None:
            return preloaded
        return self._inner().entries(saga_id)

    def forget(self, saga_id: str) -> None:
        """Drop the chain preloaded for the saga (its ``ERASED`` was seen)."""
        self._preloaded.pop(saga_id, None)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """The inner journal's."""
        return self._inner().pending_approvals(saga_id)

    def close(self) -> None:
        """Nothing: the service closes the journals it made."""


class _SealingDeclarations(InMemoryJournal):
    seals = True


def declarations(*, seals: bool) -> Journal:
    """Where a service checks its tools before it connects: an in-memory journal that seals
    as the service's own journals will (with a key service), so a tool that redacts is
    admitted exactly when it can be run (docs/adr/0019-erasure.md §5)."""
    return _SealingDeclarations() if seals else InMemoryJournal()
