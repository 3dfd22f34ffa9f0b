"""Delivery tracking for :class:`~sagacity.producer.KafkaJournal`: each published event until
the broker acknowledges or refuses it, and whoever waits for that.

One :class:`Deliveries` per journal owns the producer's poll thread: it serves the delivery
reports, wakes asyncio waiters in batches, fails asyncio waits that are overdue, and keeps the
refusals no waiter was told about for :meth:`Deliveries.raise_failures` (the journal's
``flush``).  A refusal, or an acknowledgement that never came, poisons the event's saga: the
tail this process holds may not be on the topic, so the saga's next append reads it first.
"""

from __future__ import annotations

import _thread
import asyncio
import collections
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sagacity.entries._events import JournalEntry
from sagacity.errors import ConfigurationError, JournalError, JournalUnavailableError
from sagacity.producer._denied import access_denied

if TYPE_CHECKING:
    from sagacity.producer._ownership import SagaState

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]
"""An asyncio wait on a delivery: the loop to wake and the future to resolve."""


class Delivery:
    """One produced event awaiting the broker's acknowledgement.

    Waiting objects are made only when someone waits: most pipelined events are never
    waited on one by one, and a ``threading.Event`` per event is measurable on the hot path.
    :meth:`settle` is the producer's delivery callback itself (no wrapper per event), and takes
    no lock: it writes its outcome, then ``done``, then reads who waits; a waiter publishes its
    gate (or future), then reads ``done``.  Each side's statements run in order under the
    interpreter's lock, so at least one of the two sees the other: the waiter that registered
    too late finds ``done`` set, and ``settle`` wakes any waiter it found.  Waiters register
    under their :class:`Deliveries`' lock, so two of them share one gate.

    ``pending``: the saga's list of unsettled events this one is in (:meth:`track`): an
    acknowledged event takes itself out; a refused one stays, for the durable append that
    reports it.
    """

    __slots__ = ("_deliveries", "_gate", "_waiters", "done", "entry", "error", "offset", "pending")

    def __init__(self, entry: JournalEntry, deliveries: Deliveries) -> None:
        self.entry = entry
        self.done = False
        self.error: KafkaError | None = None
        self.offset = -1
        self.pending: list[Delivery] | None = None
        self._deliveries = deliveries
        # Held while someone waits for the acknowledgement; released by :meth:`settle`.
        self._gate: _thread.LockType | None = None
        # Made on the first asyncio wait only: one object fewer per pipelined event for the
        # cyclic garbage collector to track.
        self._waiters: list[Waiter] | None = None

    def settle(self, error: KafkaError | None, message: Message | None) -> None:
        self.error = error
        if error is None and message is not None:
            offset = message.offset()
            self.offset = offset if offset is not None else -1
        self.done = True
        # Read after ``done`` is set (see the class's docstring).
        gate = self._gate
        waiters = self._waiters
        if waiters:
            self._waiters = None
        if error is None:
            pending = self.pending
            if pending is not None:
                # Not contextlib.suppress: this runs once per event, on the poll thread.
                try:  # noqa: SIM105
                    pending.remove(self)
                except ValueError:  # not in it yet: track() takes it out
                    pass
        else:
            self._deliveries.failed(self)
        if gate is not None:
            gate.release()
        if waiters:
            self._deliveries.wake(waiters)

    def track(self, pending: list[Delivery]) -> None:
        """Add this (published) delivery to its saga's unsettled ``pending``, in seq order; the
        caller holds the saga's lock.  Acknowledged meanwhile, it is taken out again (by
        :meth:`settle`, or here when settle ran before it could see the list)."""
        self.pending = pending
        pending.append(self)
        if self.done and self.error is None:
            try:  # noqa: SIM105 (as in settle)
                pending.remove(self)
            except ValueError:  # settle took it out
                pass

    def wait(self, timeout: float) -> bool:
        """Block until acknowledged or refused; ``False`` when ``timeout`` passed first."""
        with self._deliveries.waiting:
            gate = self._gate
            if gate is None:
                gate = _thread.allocate_lock()
                gate.acquire()
                self._gate = gate
        if self.done:  # settled already, or before it could see the gate: nobody releases it
            return True
        # A bare lock rather than a threading.Event (a Condition and two more locks per wait):
        # whoever passes the gate opens it again for any other waiter.
        if not gate.acquire(timeout=timeout):
            return False
        gate.release()
        return True

    def async_waiter(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        future: asyncio.Future[None] = loop.create_future()
        with self._deliveries.waiting:
            if self._waiters is None:
                self._waiters = [(loop, future)]
            else:
                self._waiters.append((loop, future))
        if self.done and not future.done():
            # Settled already, or before it could see this waiter (or while waking the others):
            # resolved here; a second resolution by settle's wake-up is a no-op.
            future.set_result(None)
        return future


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _resolve_all(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def require_gil() -> None:
    """Refuse to run without the interpreter lock: the delivery handshake above and the key
    service's cached-key read rely on it (docs/adr/0024-hot-path-under-the-gil.md).

    Raises:
        ConfigurationError: the interpreter runs free-threaded with the GIL disabled.
    """
    enabled = getattr(sys, "_is_gil_enabled", None)
    if enabled is not None and not enabled():
        raise ConfigurationError(
            "the Kafka journal needs the GIL (docs/adr/0024-hot-path-under-the-gil.md): this "
            "interpreter runs free-threaded with it disabled; run with PYTHON_GIL=1 or -X gil=1"
        )


def earlier_unsettled(state: SagaState, delivery: Delivery) -> list[Delivery]:
    """The saga's events published before ``delivery`` that are not acknowledged (yet)."""
    if not state.pending:
        return []
    # A copy: acknowledged events take themselves out of the list from the poll thread.
    pending = state.pending.copy()
    seq = delivery.entry.seq
    return [d for d in pending if d.entry.seq < seq and (d.error is not None or not d.done)]


def _first(pending: list[Delivery]) -> Delivery | None:
    """``pending``'s first delivery, or ``None`` (it may be emptied meanwhile)."""
    try:
        return pending[0]
    except IndexError:
        return None


class Deliveries:
    """The deliveries of one producer: its poll thread, refusals and waits.

    Args:
        producer: the producer whose delivery reports this serves.
        ack_timeout: the longest a wait for one acknowledgement lasts (plus half a second).
        on_lost: told the saga id of an event refused or never acknowledged.
        client: the producer's settings (its principal and brokers, named when Kafka refuses
            the principal).
    """

    def __init__(
        self,
        producer: Producer,
        *,
        ack_timeout: float,
        on_lost: Callable[[str], None],
        client: Mapping[str, Any] | None = None,
    ) -> None:
        self._producer = producer
        self._client = dict(client or {})
        self.fatal: KafkaError | None = None
        """The producer's fatal error, once it had one (every later event is refused)."""
        self._ack_timeout = ack_timeout
        self._on_lost = on_lost
        self._failures: list[Delivery] = []
        self._failures_lock = threading.Lock()
        self.waiting = threading.Lock()
        """Held while a waiter registers on a delivery (see :class:`Delivery`)."""
        self._wakeups: list[Waiter] = []
        self._deadlines: collections.deque[
            tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]
        ] = collections.deque()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="sagacity-kafka-poll", daemon=True)
        self._poller.start()

    def stop(self) -> None:
        """Stop the poll thread (after the producer was flushed)."""
        self._stop.set()
        self._poller.join(timeout=5)

    # --- the poll thread -------------------------------------------------------------------
    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(0.05)
            except KafkaException as exc:
                # A fatal error (the idempotent producer refused its producer id: no
                # IdempotentWrite ACL): remembered so every wait reports it, not a timeout.
                if self.fatal is None:
                    self.fatal = exc.args[0] if exc.args else None
                    # Queued events will never be sent: their reports (refused) come now.
                    with contextlib.suppress(KafkaException, RuntimeError):
                        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._stop.wait(0.05)
            if self._wakeups:
                self._wake_batch()
            if self._deadlines:
                self._expire_overdue()

    def _expire_overdue(self) -> None:
        """Fail asyncio waits whose acknowledgement is overdue (in registration order).

        Every wait has the same timeout, so the deque is in deadline order: it is swept from
        the front until the first wait that is neither resolved nor overdue.
        """
        deadlines = self._deadlines
        now = time.monotonic()
        while deadlines:
            deadline, loop, future = deadlines[0]
            if not future.done():
                if deadline > now:
                    return
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                    loop.call_soon_threadsafe(_expire, future)
            deadlines.popleft()

    def wake(self, waiters: list[Waiter]) -> None:
        """Resolve asyncio waiters of a settled event from the thread that settled it.

        On the poll thread they are gathered and woken once per poll (one
        ``call_soon_threadsafe`` per event loop for every acknowledgement that poll served);
        elsewhere (a ``flush``) at once.
        """
        if threading.get_ident() == self._poller.ident:
            self._wakeups.extend(waiters)
            return
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def _wake_batch(self) -> None:
        batch, self._wakeups = self._wakeups, []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for loop, future in batch:
            futures = by_loop.get(loop)
            if futures is None:
                by_loop[loop] = [future]
            else:
                futures.append(future)
        for loop, futures in by_loop.items():
            # A closed loop raises RuntimeError: nobody awaits those futures any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_all, futures)

    # --- refusals --------------------------------------------------------------------------
    def failed(self, delivery: Delivery) -> None:
        """Record a refused event (from its delivery callback)."""
        with self._failures_lock:
            self._failures.append(delivery)
        # The tail this process holds may not be on the topic: re-read before writing.
        self._on_lost(delivery.entry.saga_id)

    def raise_failures(self) -> None:
        """Raise the refusals no waiter was told about (and forget them).

        Raises:
            JournalUnavailableError: an event was refused since the last call.
        """
        with self._failures_lock:
            failures, self._failures = self._failures, []
        if failures:
            first = failures[0]
            raise JournalUnavailableError(
                f"{len(failures)} journal event(s) were not acknowledged by Kafka; first: "
                f"{first.entry.event_type.value} seq {first.entry.seq}: {first.error}",
                saga_id=first.entry.saga_id,
                seq=first.entry.seq,
            )

    def reported(self, deliveries: Sequence[Delivery]) -> None:
        """Refused ``deliveries`` were reported to the caller that waited: flush need not."""
        with self._failures_lock:
            self._failures = [f for f in self._failures if f not in deliveries]

    # --- waiting ---------------------------------------------------------------------------
    def refused(self, error: KafkaError | None, entry: JournalEntry) -> JournalError | None:
        """Kafka's refusal of the principal (``error``, or the producer's fatal error) as
        :class:`~sagacity.errors.KafkaAccessDeniedError`; ``None`` when it is none."""
        for cause in (error, self.fatal):
            if cause is not None:
                doing = f"writing {entry.event_type.value} of saga {entry.saga_id!r}"
                denied = access_denied(cause, self._client, doing=doing)
                if denied is not None:
                    return denied
        return None

    def refused_now(self, exc: KafkaException, entry: JournalEntry) -> JournalError | None:
        """A produce call's refusal as the principal's refusal, if it is one: the producer's
        fatal error (``_FATAL``) is read from the poll thread, which serves it at once."""
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError._FATAL and self.fatal is None:
            deadline = time.monotonic() + 1.0
            while self.fatal is None and time.monotonic() < deadline:
                time.sleep(0.01)
        return self.refused(error, entry)

    def unacknowledged(self, entry: JournalEntry) -> JournalError:
        """Poison ``entry``'s saga and return the error for its missing acknowledgement."""
        self._on_lost(entry.saga_id)
        denied = self.refused(None, entry)
        if denied is not None:
            return denied
        return JournalUnavailableError(
            f"Kafka did not acknowledge {entry.event_type.value} seq {entry.seq} of saga "
            f"{entry.saga_id!r} within {self._ack_timeout:.1f}s",
            saga_id=entry.saga_id,
            seq=entry.seq,
        )

    def wait(self, delivery: Delivery) -> None:
        """Block until ``delivery`` is acknowledged.

        Raises:
            JournalUnavailableError: it was refused, or not acknowledged within the ack timeout.
        """
        entry = delivery.entry
        if not delivery.wait(self._ack_timeout + 0.5):
            raise self.unacknowledged(entry)
        self.check(delivery)

    async def wait_async(self, delivery: Delivery, loop: asyncio.AbstractEventLoop) -> None:
        """:meth:`wait` without blocking ``loop``."""
        entry = delivery.entry
        future = delivery.async_waiter(loop)
        if not future.done():
            # The poll thread expires it past the deadline: no timer (nor task) per event.
            self._deadlines.append((time.monotonic() + self._ack_timeout + 0.5, loop, future))
            try:
                await future
            except TimeoutError as exc:
                raise self.unacknowledged(entry) from exc
        self.check(delivery)

    async def settled_async(self, delivery: Delivery, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until ``delivery`` is acknowledged or refused (its error is not raised here)."""
        with contextlib.suppress(JournalUnavailableError):
            await self.wait_async(delivery, loop)

    def check(self, delivery: Delivery) -> None:
        """Raise the refusal of a settled ``delivery``, if it was refused.

        Raises:
            JournalUnavailableError: the broker refused the event.
        """
        if delivery.error is None:
            return
        entry = delivery.entry
        self.reported([delivery])
        denied = self.refused(delivery.error, entry)
        if denied is not None:
            raise denied
        raise JournalUnavailableError(
            f"Kafka did not acknowledge {entry.event_type.value} seq {entry.seq} of saga "
            f"{entry.saga_id!r}: {delivery.error.str()}",
            saga_id=entry.saga_id,
            seq=entry.seq,
        )

    def check_earlier(self, state: SagaState, delivery: Delivery, *, waited: bool = False) -> None:
        """Refuse an acknowledged durable event whose saga lost an earlier event.

        The broker may acknowledge an event after refusing (or timing out) an earlier pipelined
        one of the same saga; the acknowledged event then does not extend the chain on the
        topic, and an ``INTENT`` acknowledged that way must not let its tool run.  Earlier
        events not settled yet are waited for first (``waited``: the caller did).

        Raises:
            JournalUnavailableError: an earlier event of the saga was refused, or not
                acknowledged within the ack timeout; the saga is re-read on its next append.
        """
        if not state.poisoned:
            # The hot path: the saga's unsettled events (in seq order) start after this one.
            first = _first(state.pending)
            if first is None or first.entry.seq >= delivery.entry.seq:
                return
        unsettled = earlier_unsettled(state, delivery)
        if not waited:
            for earlier in unsettled:
                earlier.wait(self._ack_timeout + 0.5)
        lost = [d for d in unsettled if d.error is not None or not d.done]
        if not lost and not state.poisoned:
            return
        state.poisoned = True
        entry = delivery.entry
        if lost:
            first = lost[0]
            self.reported(lost)
            why = f"the earlier {first.entry.event_type.value} seq {first.entry.seq} was " + (
                f"refused ({first.error.str()})"
                if first.error is not None
                else f"not acknowledged within {self._ack_timeout:.1f}s"
            )
        else:
            why = "an earlier event of the saga was not acknowledged"
        raise JournalUnavailableError(
            f"Kafka acknowledged {entry.event_type.value} seq {entry.seq} of saga "
            f"{entry.saga_id!r}, but {why}: the chain on the topic may not hold seq "
            f"{entry.seq}, so it is not confirmed (for an INTENT: the tool is not called); the "
            "saga's next append reads the topic first",
            saga_id=entry.saga_id,
            seq=entry.seq,
        )
