"""Which sagas a :class:`~sagacity.producer.KafkaJournal` holds: their head and writer lease.

A saga this process opened (or continued as its live writer) is *held*: its head — the seq,
hash and chain form of its last event, all the next append needs — is kept in memory and
extended without reading the topic, for as long as the writer lease runs
(docs/adr/0004-single-writer.md, docs/adr/0011-writer-lease.md).  Not its chain: a writer's
memory does not grow with a saga's length (a conversation's saga can run for days); whoever
needs the chain reads it (``KafkaJournal.entries``).  It is let go when the saga is
handed off (approval, compensation) or ended, when the chain says another writer took it, and
it is *poisoned* — trusted no more until the topic is read — when one of its events was refused
or never acknowledged.  What the topic says about a saga's writer is
:class:`~sagacity.producer.Ownership` (read); this is the writer's side.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import TailMovedError, WriterConflictError
from sagacity.producer._delivery import Delivery
from sagacity.producer._reader import HANDOFF_EVENTS, Ownership, SagaRead, SagaReader


class SagaState:
    """Per-saga serialisation, and the saga's head while this process owns it."""

    __slots__ = (
        "__weakref__",
        "actor",
        "form",
        "hash",
        "lease_hard",
        "lease_soft",
        "lock",
        "owned",
        "pending",
        "poisoned",
        "seq",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.actor: str | None = None
        self.owned = False
        self.poisoned = False
        # The head while owned: the last event's seq and hash (what the next one links to) and
        # the saga's chain form (kept from its SAGA_OPENED).
        self.seq = 0
        self.hash = ""
        self.form = 1
        # The events published on the hot path and not acknowledged yet, in seq order (each
        # takes itself out when acknowledged; a refused one stays until a durable append or
        # flush reports it and the saga is read again).
        self.pending: list[Delivery] = []
        # The writer lease on the journal's monotonic clock (docs/adr/0011-writer-lease.md):
        # publish unconfirmed only before lease_soft; an acknowledgement after lease_hard is
        # confirmed by reading the event back.
        self.lease_soft = float("-inf")
        self.lease_hard = float("-inf")


def tail_moved(saga_id: str, after_seq: int, tail: int) -> TailMovedError:
    """The refusal of a compare-and-append whose saga is at ``tail``, not ``after_seq``."""
    return TailMovedError(
        f"saga {saga_id!r} is at seq {tail}, not {after_seq}: another writer appended since it "
        "was read; nothing was appended",
        saga_id=saga_id,
        seq=tail,
    )


class HeldSagas:
    """The state of every saga a journal is writing, and the ones it holds.

    Args:
        reader: reads an event back when its acknowledgement came after the lease.
        monotonic: the clock the lease is measured on.
        lease_soft_span: how long after sending an acknowledged event the hot path may publish
            unconfirmed.
        lease_hard_span: after how long an acknowledgement must be confirmed by reading back.
    """

    def __init__(
        self,
        *,
        reader: SagaReader,
        monotonic: Callable[[], float],
        lease_soft_span: float,
        lease_hard_span: float,
    ) -> None:
        self._reader = reader
        self._monotonic = monotonic
        self._lease_soft_span = lease_soft_span
        self._lease_hard_span = lease_hard_span
        self.states: weakref.WeakValueDictionary[str, SagaState] = weakref.WeakValueDictionary()
        """Every saga being written or read to write (gone once nobody holds its state)."""
        self.owned: dict[str, SagaState] = {}
        """The sagas this journal holds (kept alive while held)."""
        self._lock = threading.Lock()

    def state(self, saga_id: str) -> SagaState:
        """The saga's state, made on first use."""
        owned = self.owned.get(saga_id)  # the hot path: a saga this process holds
        if owned is not None:
            return owned
        with self._lock:
            state = self.states.get(saga_id)
            if state is None:
                state = SagaState()
                self.states[saga_id] = state
            return state

    def get(self, saga_id: str) -> SagaState | None:
        """The saga's state if it has one (never made here)."""
        return self.states.get(saga_id)

    def release(self, saga_id: str, state: SagaState) -> None:
        """Let the saga go: its next append reads the topic."""
        state.owned = False
        state.actor = None
        with self._lock:
            self.owned.pop(saga_id, None)

    def mark_poisoned(self, saga_id: str) -> None:
        """An event of the saga was refused or not acknowledged: trust its tail no more."""
        state = self.states.get(saga_id)
        if state is not None:
            state.poisoned = True

    # --- the writer lease (docs/adr/0011-writer-lease.md) -------------------------------------
    def extend_lease(self, state: SagaState, sent: float) -> None:
        """Renew the lease from an acknowledged event sent at ``sent`` (monotonic).

        Unlocked: two acknowledgements racing may leave the earlier one's lease, which only
        makes the next append confirm sooner.
        """
        if sent + self._lease_soft_span > state.lease_soft:
            state.lease_soft = sent + self._lease_soft_span
            state.lease_hard = sent + self._lease_hard_span

    def renew(self, state: SagaState, delivery: Delivery, sent: float) -> None:
        """After a durable hot-path append: renew the lease, or confirm a late acknowledgement.

        An event acknowledged only after the lease ran out may have reached the broker after
        another process took the saga over; it is then read back, and if it is not the event
        accepted at its seq the writer has lost the saga.

        Raises:
            WriterConflictError: the saga was taken over; the event is a reported fork.
        """
        if self._monotonic() >= state.lease_hard:
            entry = delivery.entry
            confirm = self._reader.read(entry.saga_id, until_offset=delivery.offset)
            if confirm.accepted_offset(entry.seq) != delivery.offset:
                with state.lock:
                    self.release(entry.saga_id, state)
                raise WriterConflictError(
                    f"the lease on saga {entry.saga_id!r} ran out before the broker acknowledged "
                    f"{entry.event_type.value} seq {entry.seq}, and another writer appended that "
                    "seq first (a takeover): it is a reported fork, not part of the chain",
                    saga_id=entry.saga_id,
                    seq=entry.seq,
                )
        self.extend_lease(state, sent)

    # --- confirmed appends -----------------------------------------------------------------
    def admit(
        self,
        state: SagaState,
        current: SagaRead,
        owner: Ownership,
        *,
        writer_id: str,
        takeover_from: str | None = None,
    ) -> bool:
        """Whether ``writer_id`` may append to the saga as read (``current``, whose ownership
        is ``owner``); the caller holds the saga's lock.  Returns whether the saga's live writer
        is this one.

        ``takeover_from``: the live writer this append may take the saga from (a takeover).

        Raises:
            WriterConflictError: this journal held the saga and the chain says it no longer
                does (it was taken over), or another live writer holds it.
        """
        saga_id = current.saga_id
        mine = owner.writer == writer_id or (
            state.actor is not None and owner.writer == state.actor
        )
        if state.owned and not (owner.live and mine):
            # This journal held the saga (its lease ran out, or an acknowledgement failed) and
            # the chain says it no longer does: it was taken over. Refuse before the caller
            # acts (for an INTENT: before the tool is called).
            self.release(saga_id, state)
            raise WriterConflictError(
                f"saga {saga_id!r} is no longer held by this writer: "
                + (
                    f"it is open by writer {owner.writer!r} (SAGA_OPENED at seq {owner.opened_seq})"
                    if owner.live
                    else f"seq {current.tail[0]} handed it off or ended it"
                )
                + "; nothing was appended",
                saga_id=saga_id,
            )
        if owner.live and not mine and not (takeover_from and owner.writer == takeover_from):
            raise WriterConflictError(
                f"saga {saga_id!r} is open by writer {owner.writer!r} (SAGA_OPENED at seq "
                f"{owner.opened_seq}); it accepts events from another writer only after it "
                "hands the saga off (approval, compensation) or ends it",
                saga_id=saga_id,
            )
        return mine

    def confirmed(
        self,
        state: SagaState,
        entry: JournalEntry,
        *,
        head: JournalEntry,
        owner: Ownership,
        mine: bool,
        sent: float,
    ) -> None:
        """After ``entry`` was confirmed on the topic: hold the saga or let it go.

        Held (with ``head``, the last accepted event as read back, and a lease from ``sent``)
        when ``entry`` opens it or continues it as its live writer, and does not hand it off.

        Args:
            owner: the saga's ownership as read before ``entry`` was published.
            mine: :meth:`admit`'s answer for that read.
        """
        saga_id = entry.saga_id
        state.poisoned = False
        takes_over = entry.event_type is EventType.SAGA_OPENED or (owner.live and mine)
        if takes_over and entry.event_type not in HANDOFF_EVENTS:
            state.owned = True
            state.actor = owner.writer if mine and owner.live else entry.actor
            if entry.event_type is EventType.SAGA_OPENED:
                state.actor = entry.actor
            state.seq, state.hash, state.form = head.seq, head.hash, head.form
            state.lease_soft = sent + self._lease_soft_span
            state.lease_hard = sent + self._lease_hard_span
            with self._lock:
                self.owned[saga_id] = state
        else:
            self.release(saga_id, state)
