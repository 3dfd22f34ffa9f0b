"""The approvals' request store in memory: :class:`~sagacity.ports.FoldingRequestStore` for
tests (the request consumer's batches included, so the approvals server runs on it).

Rows are derived from each saga's kept entries by the core's fold (:func:`sagacity.gate._requests.
request_states`, the entries kept by :func:`sagacity.gate._requests.request_input`), as the
Postgres projection derives them; the contract suites hold both to the same rows, and to the
same batches (:class:`~sagacity.testing.contracts.FoldingRequestStoreContract`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from sagacity.chain._acceptance import QUIET, Refusal, Tail, admit
from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry, now_micros
from sagacity.errors import DecisionInProgressError
from sagacity.gate._deadline_extension import counted_extensions
from sagacity.gate._requests import (
    RequestState,
    counted_approvals,
    deadline_us,
    request_input,
    request_states,
)
from sagacity.ports import (
    OPEN_STATES,
    AttentionRow,
    Fault,
    GateStats,
    QuarantinedEvent,
    RequestRow,
)
from sagacity.saga._result import SagaStatus
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import OperatorVerifier

_LEAVES = frozenset(
    {
        SagaStatus.COMPLETED.value,
        SagaStatus.COMPENSATED.value,
        SagaStatus.REJECTED.value,
        SagaStatus.EXPIRED.value,
    }
)
"""Final statuses that take a saga out of the attention queue."""


def request_row(state: RequestState, entries: Sequence[JournalEntry] = ()) -> RequestRow:
    """The row of one request from its state in the core's fold
    (:meth:`~sagacity.ports.RequestRow.from_state`; ``entries`` is not needed any more)."""
    del entries
    return RequestRow.from_state(state)


def _percentile(values: Sequence[int], fraction: float) -> float | None:
    """Postgres' ``percentile_cont``: linear interpolation between the nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class InMemoryRequestStore:
    """Approval requests of one topic in process memory; safe under threads.

    Args:
        topic: the journal topic whose requests the store holds.
        verifier: the approvals service's decision keys: an ``APPROVED`` counts only when it
            verifies as the resume requires.  ``None``: every journaled approval counts.
        journal: the journal's name (:attr:`Sagacity.journal_identity`), which a counted
            approval names; required with ``verifier``.
        clock: the service's clock (microseconds): when a request is first folded
            (``seen_at_us``).
        operator: the pinned operator key(s): a ``DEADLINE_EXTENDED`` moves a row's deadline
            only when it verifies (``None``: none does).
    """

    def __init__(
        self,
        *,
        topic: str = DEFAULT_TOPIC,
        verifier: DecisionVerifier | None = None,
        journal: str | None = None,
        clock: Callable[[], int] = now_micros,
        operator: OperatorVerifier | None = None,
    ) -> None:
        self.topic = topic
        self._clock = clock
        self._counts = counted_approvals(verifier, journal)
        self._extends = counted_extensions(operator, journal=journal)
        self._kept: dict[str, dict[int, JournalEntry]] = {}
        self._rows: dict[tuple[str, int], RequestRow] = {}
        self._attention: dict[str, AttentionRow] = {}
        self._tails: dict[str, Tail] = {}
        self._quarantine: list[QuarantinedEvent] = []
        self._offsets: dict[str, dict[int, int]] = {}
        # Reentrant: a batch (folding) holds it from its first fold to its end.
        self._lock = threading.RLock()
        self._saga_locks: dict[str, threading.Lock] = {}

    def migrate(self) -> None:
        """Nothing to create."""

    def ping(self) -> None:
        """Always answers."""

    def apply(self, entries: Iterable[JournalEntry]) -> None:
        """Fold ``entries`` into the store: each passes the acceptance rule against its saga's
        tail first (see :meth:`sagacity.ports.RequestStore.apply`)."""
        for entry in entries:
            self.apply_message(entry)

    def apply_message(
        self,
        entry: JournalEntry,
        *,
        key: str | None = None,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | None:
        """Judge and fold one message of the topic as the consumer does: ``key`` names its
        saga (default: the one its body names), ``placed`` says it is on its key's
        partition, ``prefix`` reads the saga's tail before it (a saga first seen past its
        first event), ``position`` is where it is on the topic (kept with a refusal).
        ``None`` when it was accepted, else why it was refused."""
        saga_id = entry.saga_id if key is None else key
        with self._lock:
            kept = self._kept.setdefault(saga_id, {})
            refusal = admit(
                self._tails.get(saga_id),
                saga_id,
                entry,
                placed=placed,
                prefix=prefix,
                known_hash=lambda seq: kept[seq].hash if seq in kept else None,
            )
            if refusal is not None:
                if refusal.kind not in QUIET:
                    self._set_aside(saga_id, entry, refusal.kind.value, refusal.detail, position)
                return refusal
            self._tails[saga_id] = Tail(seq=entry.seq, hash=entry.hash)
            self._fold_attention(entry)
            if request_input(kept.values(), entry):
                kept[entry.seq] = entry
                chain = [kept[seq] for seq in sorted(kept)]
                seen = self._clock()
                for state in request_states(chain, counts=self._counts, extends=self._extends):
                    row_key = (saga_id, state.request.seq)
                    held = self._rows.get(row_key)
                    first = seen if held is None or held.seen_at_us is None else held.seen_at_us
                    self._rows[row_key] = replace(RequestRow.from_state(state), seen_at_us=first)
            return None

    def _set_aside(
        self,
        saga_id: str,
        entry: JournalEntry,
        kind: str,
        detail: str,
        position: tuple[int, int] | None,
    ) -> None:
        """Keep a refused event with its reason, once per position of the topic."""
        partition, offset = position if position is not None else (None, None)
        if position is not None and any(
            (q.partition, q.offset) == position for q in self._quarantine
        ):
            return
        self._quarantine.append(
            QuarantinedEvent(
                saga_id=saga_id,
                seq=entry.seq,
                event_type=entry.event_type.value,
                kind=kind,
                detail=detail,
                entry_hash=entry.hash,
                partition=partition,
                offset=offset,
            )
        )

    def quarantined(
        self, *, saga_id: str | None = None, limit: int = 500
    ) -> list[QuarantinedEvent]:
        """Events refused by the acceptance rule, oldest first."""
        with self._lock:
            found = [q for q in self._quarantine if saga_id is None or q.saga_id == saga_id]
        return found[:limit]

    def _fold_attention(self, entry: JournalEntry) -> None:
        if entry.event_type is not EventType.SAGA_ENDED:
            return
        held = self._attention.get(entry.saga_id)
        if entry.result == SagaStatus.COMPENSATION_FAILED.value:
            if held is None or held.ended_seq < entry.seq:
                self._attention[entry.saga_id] = AttentionRow(
                    saga_id=entry.saga_id,
                    status=entry.result,
                    detail=entry.attributes.get(attr.DIRTY) or entry.error or "compensation failed",
                    since_us=entry.recorded_at_us,
                    ended_seq=entry.seq,
                )
        elif entry.result in _LEAVES and held is not None and held.ended_seq < entry.seq:
            del self._attention[entry.saga_id]

    def _all(self) -> list[RequestRow]:
        with self._lock:
            return list(self._rows.values())

    def get(self, saga_id: str, seq: int) -> RequestRow | None:
        """The request at ``seq`` of ``saga_id``, if folded."""
        with self._lock:
            return self._rows.get((saga_id, seq))

    def requests(
        self,
        *,
        states: Sequence[str] = OPEN_STATES,
        tools: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[RequestRow]:
        """Requests in ``states`` (open by default), oldest first; ``tools`` filters by tool."""
        rows = [
            r for r in self._all() if r.state.value in states and (tools is None or r.tool in tools)
        ]
        rows.sort(key=lambda r: (r.requested_at_us, r.saga_id, r.seq))
        return rows[:limit]

    def decided(self, *, since_us: int) -> list[RequestRow]:
        """Requests decided (approved, rejected, expired) at or after ``since_us``."""
        rows = [
            r for r in self._all() if r.decided_at_us is not None and r.decided_at_us >= since_us
        ]
        return sorted(rows, key=lambda r: r.decided_at_us or 0)

    def closed(self, states: Sequence[str], *, since_us: int, limit: int = 200) -> list[RequestRow]:
        """Requests closed in ``states`` at or after ``since_us``, newest first."""
        rows = [
            r
            for r in self._all()
            if r.state.value in states and r.closed_at_us is not None and r.closed_at_us >= since_us
        ]
        rows.sort(key=lambda r: r.closed_at_us or 0, reverse=True)
        return rows[:limit]

    def overdue(self, now_us: int, ttl_us: int | None, *, limit: int = 100) -> list[RequestRow]:
        """Open requests past their deadline (:func:`sagacity.gate._requests.deadline_us`, plus
        the verified extensions the fold counted)."""

        def deadline(row: RequestRow) -> int | None:
            due = deadline_us(
                row.requested_at_us,
                seen_at_us=row.seen_at_us,
                expires_at_us=row.expires_at_us,
                ttl_us=ttl_us,
            )
            return None if due is None else due + max(row.extended_by_us, 0)

        rows = []
        for row in self._all():
            due = deadline(row)
            if row.open and due is not None and due < now_us:
                rows.append(row)
        rows.sort(key=lambda r: r.requested_at_us)
        return rows[:limit]

    def stats(self, *, now_us: int, window_s: float) -> GateStats:
        """Gate metrics for decisions journaled in the last ``window_s`` seconds."""
        since = now_us - int(window_s * 1_000_000)
        rows = self._all()
        decided = [r for r in rows if r.decided_at_us is not None and r.decided_at_us >= since]
        latencies = [
            (r.decided_at_us or 0) - r.requested_at_us
            for r in decided
            if r.decision in ("approved", "rejected")
        ]
        waiting = [r for r in rows if r.open]
        oldest = min((r.requested_at_us for r in waiting), default=None)
        p50, p95 = _percentile(latencies, 0.5), _percentile(latencies, 0.95)
        return GateStats(
            window_s=window_s,
            approved=sum(r.decision == "approved" for r in decided),
            rejected=sum(r.decision == "rejected" for r in decided),
            expired=sum(r.decision == "expired" for r in decided),
            pending=len(waiting),
            oldest_pending_age_s=(now_us - oldest) / 1e6 if oldest is not None else None,
            latency_p50_s=p50 / 1e6 if p50 is not None else None,
            latency_p95_s=p95 / 1e6 if p95 is not None else None,
        )

    def attention(self, *, limit: int = 500) -> list[AttentionRow]:
        """Sagas whose last run ended ``COMPENSATION_FAILED``, oldest first."""
        with self._lock:
            rows = sorted(self._attention.values(), key=lambda r: (r.since_us, r.saga_id))
        return rows[:limit]

    @contextmanager
    def deciding(self, *, lock_timeout_s: float | None = None) -> Iterator[InMemoryDecision]:
        """A decision's unit of work: the sagas it locks stay locked until the block ends,
        however it ends (a unit cut short keeps what it folded: the rows mirror the chain)."""
        unit = InMemoryDecision(self, lock_timeout_s)
        try:
            yield unit
        finally:
            unit.release()

    # -- the request consumer's batches (FoldingRequestStore) -------------------------------
    def offsets(self, topic: str) -> dict[int, int]:
        """The positions stored for ``topic``'s partitions."""
        with self._lock:
            return dict(self._offsets.get(topic, {}))

    @contextmanager
    def folding(self) -> Iterator[InMemoryFold]:
        """A batch of the request consumer (:class:`~sagacity.ports.RequestFold`), kept when
        the block returns and undone entirely when it raises; the batch holds the store
        until it ends (other threads wait), as one transaction would."""
        with self._lock:
            before = _Snapshot.of(self)
            try:
                yield InMemoryFold(self)
            except BaseException:
                before.restore(self)
                raise

    def _store_offset(self, topic: str, partition: int, next_offset: int) -> None:
        with self._lock:
            stored = self._offsets.setdefault(topic, {})
            stored[partition] = max(stored.get(partition, next_offset), next_offset)

    def _saga_lock(self, saga_id: str) -> threading.Lock:
        with self._lock:
            return self._saga_locks.setdefault(saga_id, threading.Lock())

    def _tail(self, saga_id: str) -> Tail | None:
        with self._lock:
            return self._tails.get(saga_id)


class InMemoryDecision:
    """:class:`~sagacity.ports.RequestDecision` of an :class:`InMemoryRequestStore`: a lock
    per saga, held from the unit's first locking read to its end."""

    def __init__(self, store: InMemoryRequestStore, lock_timeout_s: float | None) -> None:
        self._store = store
        self._timeout = -1.0 if lock_timeout_s is None else max(0.0, lock_timeout_s)
        self._held: dict[str, threading.Lock] = {}

    def _take(self, saga_id: str, *, wait: bool) -> bool:
        if saga_id in self._held:
            return True
        lock = self._store._saga_lock(saga_id)
        if not (lock.acquire(timeout=self._timeout) if wait else lock.acquire(blocking=False)):
            return False
        self._held[saga_id] = lock
        return True

    def get(self, saga_id: str, seq: int, *, lock: bool = False) -> RequestRow | None:
        """The row; ``lock`` takes the saga's lock first, waiting up to the unit's timeout."""
        if lock and not self._take(saga_id, wait=True):
            raise DecisionInProgressError(
                "another decision on this request holds its lock; retry shortly",
                saga_id=saga_id,
                seq=seq,
            )
        return self._store.get(saga_id, seq)

    def lock_open(self, saga_id: str, seq: int) -> bool:
        """Take the saga's lock without waiting; ``False`` when held elsewhere or the request
        is not open."""
        if not self._take(saga_id, wait=False):
            return False
        row = self._store.get(saga_id, seq)
        return row is not None and row.open

    def fold(self, saga_id: str, entries: Sequence[JournalEntry]) -> None:
        """Fold the saga's chain past the tail the store holds, each event judged first."""
        tail = self._store._tail(saga_id)
        for entry in entries:
            if tail is None or entry.seq > tail.seq:
                self._store.apply_message(entry, key=saga_id)

    def release(self) -> None:
        """Release every lock the unit holds."""
        held, self._held = self._held, {}
        for lock in held.values():
            lock.release()


@dataclass(frozen=True)
class _Snapshot:
    """What an :class:`InMemoryRequestStore` holds, to undo a batch that raised."""

    kept: dict[str, dict[int, JournalEntry]]
    rows: dict[tuple[str, int], RequestRow]
    attention: dict[str, AttentionRow]
    tails: dict[str, Tail]
    quarantine: list[QuarantinedEvent]
    offsets: dict[str, dict[int, int]]

    @classmethod
    def of(cls, store: InMemoryRequestStore) -> _Snapshot:
        return cls(
            kept={saga: dict(kept) for saga, kept in store._kept.items()},
            rows=dict(store._rows),
            attention=dict(store._attention),
            tails=dict(store._tails),
            quarantine=list(store._quarantine),
            offsets={topic: dict(held) for topic, held in store._offsets.items()},
        )

    def restore(self, store: InMemoryRequestStore) -> None:
        store._kept = self.kept
        store._rows = self.rows
        store._attention = self.attention
        store._tails = self.tails
        store._quarantine = self.quarantine
        store._offsets = self.offsets


class InMemoryFold:
    """:class:`~sagacity.ports.RequestFold` of an :class:`InMemoryRequestStore`: one batch of
    the request consumer, kept or undone as one."""

    def __init__(self, store: InMemoryRequestStore) -> None:
        self._store = store

    def fold(
        self,
        entry: JournalEntry,
        *,
        saga_id: str,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | Fault | None:
        """Judge and fold one message (:meth:`InMemoryRequestStore.apply_message`); memory
        refuses no value, so a fault never comes of it."""
        return self._store.apply_message(
            entry, key=saga_id, placed=placed, prefix=prefix, position=position
        )

    def quarantine(
        self, entry: JournalEntry, fault: Fault, *, saga_id: str, position: tuple[int, int] | None
    ) -> bool:
        """Keep ``entry`` in the quarantine with ``fault`` (once per position)."""
        with self._store._lock:
            self._store._set_aside(saga_id, entry, fault.kind, fault.detail, position)
        return True

    def store_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """The consumer's position on ``topic``, kept with the batch (never moved back)."""
        self._store._store_offset(topic, partition, next_offset)
