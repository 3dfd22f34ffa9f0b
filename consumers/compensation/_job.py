"""The per-saga job: compensating one saga for one ``COMPENSATION_REQUESTED``.

What the compensation service does for a saga once its request is due: take the saga's lock in
Postgres, read the saga's chain and refuse it (poison) unless the request is on it and it
verifies, own the saga (``SAGA_OPENED``), journal the outcomes the claims prove for steps a
crash interrupted, run the core's compensation with the claiming invoker, and release the lock.
Transient failures are retried; the job stops before its next step when the service no longer
owns the saga's partition (:class:`~sagacity.consumers.compensation._journal.Revoked`).  The
consumer side (which requests are due, offsets, rebalances) is the service's
(``_service.py``); see docs/adr/0007-compensation-exactly-once.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from sagacity.chain import verify
from sagacity.chain._acceptance import ForkKind
from sagacity.consumers.compensation import _failpoints
from sagacity.consumers.compensation._invoker import ClaimingInvoker
from sagacity.consumers.compensation._journal import Revoked, ServiceJournal
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    ChainIntegrityError,
    CompensationConflictError,
    CompensationInterruptedError,
    JournalError,
    PersistenceError,
    UnopenableError,
)
from sagacity.ports import Claim, ClaimStatus, ClaimStore, Record, SagaRead
from sagacity.saga._result import SagaResult
from sagacity.saga._saga import Sagacity
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.telemetry import _tracing
from sagacity.undo._standing import standing

log = logging.getLogger("sagacity.compensation")

WRITER_PREFIX = "sagacity-compensation/"
"""Every instance's writer id starts with it (the claim protocol is in force for its events)."""

_REASONS = frozenset(
    {
        EventType.FAILED,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.SUSPECT_SETTLED,
    }
)


def _reason(request: JournalEntry) -> EventType:
    try:
        reason = EventType(request.attributes.get(attr.REASON, EventType.FAILED.value))
    except ValueError:
        return EventType.FAILED
    return reason if reason in _REASONS else EventType.FAILED


class Poison(Exception):  # noqa: N818 - a flow signal inside the service
    """The request cannot be acted on (its chain does not verify, it is not on the chain)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Duplicate(Exception):  # noqa: N818 - a flow signal inside the service
    """The message is a duplicate of an accepted event.

    Attributes:
        read: the saga's chain as read (the accepted request is on it).
    """

    def __init__(self, read: SagaRead) -> None:
        super().__init__(f"saga {read.saga_id!r}: a redelivered copy of an accepted request")
        self.read = read


class ChainReader(Protocol):
    """Reads one saga's chain (a worker thread's journal on the topic)."""

    def read(self, saga_id: str) -> SagaRead:
        """The saga's accepted chain and what was refused."""
        ...


def read_request(reader: ChainReader, request: JournalEntry, offset: int) -> SagaRead:
    """The saga's chain, refused unless ``request`` (read at ``offset``) is on it and it verifies.

    Raises:
        Poison: the chain holds an edited or foreign event, the request is not on the
            accepted chain, or the chain does not verify.
        Duplicate: the message is a redelivered copy of the accepted request.
    """
    read = reader.read(request.saga_id)
    for rejected in read.rejected:
        if rejected.kind in (ForkKind.EDITED, ForkKind.FOREIGN):
            raise Poison(
                "chain_does_not_verify",
                f"saga {read.saga_id!r}: {rejected.kind.value} event at offset "
                f"{rejected.offset} (seq {rejected.entry.seq}): {rejected.detail}",
            )
    if read.accepted_offset(request.seq) != offset:
        mine = [r for r in read.rejected if r.offset == offset]
        if mine and mine[0].kind is ForkKind.DUPLICATE:
            raise Duplicate(read)
        accepted = read.accepted_offset(request.seq)
        index = request.seq - read.base_seq - 1
        if (
            not mine
            and accepted is not None
            and accepted < offset
            and read.entries[index].hash == request.hash
        ):
            # A redelivered copy the archive (the read index) did not keep: a duplicate.
            raise Duplicate(read)
        detail = mine[0].detail if mine else "not found on the saga's chain"
        raise Poison(
            "not_on_chain",
            f"saga {read.saga_id!r}: COMPENSATION_REQUESTED at offset {offset} is not "
            f"part of the accepted chain: {detail}",
        )
    verdict = verify(
        read.entries, saga_id=read.saga_id, after_seq=read.base_seq, after_hash=read.base_hash
    )
    if not verdict.ok:
        raise Poison(
            "chain_does_not_verify",
            f"saga {read.saga_id!r} does not verify at seq {verdict.bad_seq}: "
            f"{verdict.reason}: {verdict.detail}",
        )
    return read


class ThreadJournal(ChainReader, Protocol):
    """A worker thread's journal: reads a saga's chain and its entries."""

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's accepted entries."""
        ...


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """What every job of one service instance shares.

    Attributes:
        sagacity: the core on the service's journal (delegated compensation).
        journal: the service's journal (hands each append to the worker thread's journal).
        claims: the claims and saga locks in Postgres.
        invoker: calls the undo under a claim.
        writer_id: this instance's writer id (the actor of journaled outcomes).
        thread_journal / drop_thread_journal: the worker thread's journal, and forgetting it
            (its in-memory tail of a saga must never be written on again).
        may_write: whether this instance still owns the saga's partition.
        saga_lock: serialises this instance's jobs of one saga.
        dead_letter: parks the request's message with a reason while ``go_on()``; ``False``
            if abandoned.
        first_call: per saga, when its request was recorded (for the start-latency metric).
        ended: told each compensation's result.
        operator: the pinned operator keys: a request after the saga's end is acted on only
            when one of them signed it (``None``: never).
        refused: told each request refused that way (reason), before it is dead-lettered.
    """

    sagacity: Sagacity
    journal: ServiceJournal
    claims: ClaimStore
    invoker: ClaimingInvoker
    writer_id: str
    thread_journal: Callable[[], ThreadJournal]
    drop_thread_journal: Callable[[], None]
    may_write: Callable[[str], bool]
    saga_lock: Callable[[str], AbstractContextManager[None]]
    dead_letter: Callable[[Record, str, str, Callable[[], bool]], bool]
    first_call: dict[str, int]
    ended: Callable[[SagaResult], None]
    operator: OperatorVerifier | None = None
    refused: Callable[[str], None] = lambda reason: None


class SagaJob:
    """Compensates one saga for the ``COMPENSATION_REQUESTED`` ``request``.

    Args:
        context: the instance's shared parts.
        message: the request's message (dead-lettered if the request is poison).
        request: the decoded request.
        offset: where the message was read.
        deadline: when to stop waiting for the requesting run's ``SAGA_ENDED``
            (``time.monotonic()``).
    """

    def __init__(
        self,
        context: JobContext,
        *,
        message: Record,
        request: JournalEntry,
        offset: int,
        deadline: float,
    ) -> None:
        self.context = context
        self.message = message
        self.request = request
        self.offset = offset
        self.deadline = deadline

    def _guard(self, saga_id: str) -> None:
        if not self.context.may_write(saga_id):
            raise Revoked(f"no longer the owner of saga {saga_id!r}")

    def run(self) -> None:
        """Compensate the saga, retrying transient failures; dead-letter poison.

        Raises:
            Revoked: the instance no longer owns the saga's partition (the next owner goes on).
        """
        saga = self.request.saga_id
        delay = 0.1
        with self.context.saga_lock(saga):
            while True:
                self._guard(saga)
                try:
                    self._compensate_traced()
                    return
                except Poison as poison:
                    self._dead_letter(poison)
                    return
                except UnopenableError as exc:
                    # The saga's data key cannot be had here (missing, under a KEK not held):
                    # no retry can open or seal it; the request is that saga's fate.
                    self._dead_letter(Poison(exc.reason, exc.message))
                    return
                except Revoked:
                    raise
                except (
                    JournalError,
                    PersistenceError,
                    CompensationConflictError,
                    CompensationInterruptedError,
                ) as exc:
                    # Transient (broker, database, a racing writer): read the chain again.
                    log.warning(
                        "compensation interrupted, retrying: %s", exc, extra={"saga_id": saga}
                    )
                except Exception:
                    # Unexpected: keep the offset uncommitted and try again rather than stall
                    # the partition's commits behind a job that will never finish.
                    log.exception(
                        "compensation failed unexpectedly, retrying", extra={"saga_id": saga}
                    )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _dead_letter(self, poison: Poison) -> None:
        saga = self.request.saga_id
        parked = self.context.dead_letter(
            self.message, poison.reason, poison.detail, lambda: self.context.may_write(saga)
        )
        if not parked:
            raise Revoked(f"no longer the owner of saga {saga!r}")

    def _read(self) -> SagaRead:
        try:
            return read_request(self.context.thread_journal(), self.request, self.offset)
        except Duplicate as duplicate:
            # A copy of the accepted request: act on the chain as it is, since the copy may
            # have taken its original's place in the consumer's queue.
            log.info("the request is a redelivered copy", extra={"saga_id": duplicate.read.saga_id})
            return duplicate.read

    def _compensate_traced(self) -> None:
        """:meth:`_compensate` in a span continuing the trace of the request's event (its
        ``traceparent`` header): the undos' spans are its children."""
        parent = _tracing.header_traceparent(self.message.headers()) if _tracing.tracer else None
        attributes: dict[str, str | int | bool] = {
            _tracing.SAGA_ID: self.request.saga_id,
            _tracing.SEQ: self.request.seq,
        }
        with _tracing.span("compensate", attributes=attributes, parent=parent) as span:
            self._compensate()
            span.outcome = "handled"

    def _lock_saga(self, saga: str) -> None:
        """Take the saga's lock, waiting while another instance compensates it."""
        waiting_since = time.monotonic()
        said = 0.0
        while not self.context.claims.try_lock_saga(saga):
            # Another instance is compensating it (a rebalance in progress): wait for it.
            self._guard(saga)
            waited = time.monotonic() - waiting_since
            if waited - said >= 30.0:
                said = waited
                log.info(
                    "waiting %.0fs for the saga's lock (another session holds it)",
                    waited,
                    extra={"saga_id": saga},
                )
            time.sleep(0.05)

    def _read_after_grace(self, saga: str) -> SagaRead:
        """The saga read once the requesting run's ``SAGA_ENDED`` follows its request, or
        its grace ran out."""
        read = self._read()
        # Normally the requesting run's SAGA_ENDED is on the chain already (the consumer
        # waits for its message); when that run died before writing it, wait out the grace
        # so a late SAGA_ENDED cannot lose the race for its seq.
        deadline = self.deadline
        while (
            read.entries[-1].event_type is EventType.COMPENSATION_REQUESTED
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
            self._guard(saga)
            read = self._read()
        return read

    def _compensate(self) -> None:
        saga = self.request.saga_id
        self._lock_saga(saga)
        try:
            read = self._read_after_grace(saga)
            found = standing(
                read.entries,
                operator=self.context.operator,
                settlement_counts=self.context.sagacity.settlement_counts,
                journal=self.context.sagacity.journal_identity,
            )
            refusal = found.refusal_of(self.request.seq)
            if refusal is not None:
                # Finished work is undone only on an operator's signed word (ADR 0027).
                self.context.refused(refusal.reason)
                log.warning(
                    "compensation request refused: %s",
                    refusal.detail,
                    extra={"saga_id": saga, "seq": refusal.request.seq, "reason": refusal.reason},
                )
                raise Poison(refusal.reason, refusal.detail)
            request = found.request
            if request is None:
                log.info(
                    "nothing to compensate: the saga ended or was erased after its request",
                    extra={"saga_id": saga, "seq": read.entries[-1].seq},
                )
                return
            # Own the saga for the run (docs/adr/0004-single-writer.md, hand-offs): one
            # confirmed SAGA_OPENED, then every step on the journal's hot path.  The writer id
            # is the group's, so any instance can take over from one that died mid-run.
            self.context.journal.append(
                EntryDraft(
                    saga_id=saga,
                    event_type=EventType.SAGA_OPENED,
                    attributes={attr.COMPENSATION: "delegated"},
                )
            )
            try:
                entries = self._reconcile(saga, self.context.thread_journal().entries(saga))
                self.context.journal.preload(saga, entries)
                self.context.first_call[saga] = request.recorded_at_us
                try:
                    result = self.context.sagacity.compensate(
                        saga,
                        reason=_reason(request),
                        error=request.error,
                        invoke=self.context.invoker,
                    )
                except ChainIntegrityError as exc:
                    raise Poison("chain_does_not_verify", exc.message) from exc
                finally:
                    self.context.first_call.pop(saga, None)
            except BaseException:
                # The journal may hold this saga's tail in memory; another instance may extend
                # the chain next, so that tail must never be written on again.
                self.context.drop_thread_journal()
                raise
            self.context.ended(result)
            _failpoints.reach("after_end")
        finally:
            self.context.claims.unlock_saga(saga)

    def _reconcile(self, saga_id: str, entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
        """Journal outcomes the claims know of but the chain lacks (a crash in between)."""
        last: dict[int, JournalEntry] = {}
        for entry in entries:
            if entry.ref_seq is not None and entry.event_type in (
                EventType.COMPENSATION_INTENT,
                EventType.COMPENSATED,
                EventType.COMPENSATION_FAILED,
                EventType.SUSPECT,
            ):
                last[entry.ref_seq] = entry
        open_steps = {
            seq: e for seq, e in last.items() if e.event_type is EventType.COMPENSATION_INTENT
        }
        if not open_steps:
            return entries
        wrote = False
        claims = _step_claims(self.context.claims.claims(saga_id), entries)
        for seq, intent in sorted(open_steps.items()):
            claim = claims.get(seq)
            draft = self._recorded_outcome(saga_id, seq, intent, claim)
            if draft is None:
                continue
            self._guard(saga_id)
            self.context.journal.append(draft, durable=True)
            log.info(
                "journaled the known outcome of an interrupted step: %s",
                draft.event_type.value,
                extra={"saga_id": saga_id, "seq": seq},
            )
            wrote = True
        if not wrote:
            return entries
        return self.context.thread_journal().entries(saga_id)

    def _recorded_outcome(
        self, saga_id: str, seq: int, intent: JournalEntry, claim: Claim | None
    ) -> EntryDraft | None:
        """The outcome the claim proves for a step whose intent has none on the chain."""

        def make(event: EventType, **fields: Any) -> EntryDraft:
            return EntryDraft(
                saga_id=saga_id,
                event_type=event,
                tool=intent.tool,
                actor=self.context.writer_id,
                **fields,
            )

        if claim is not None and claim.unbound:
            return None  # perhaps another journal's: proves nothing; the invoker weighs it
        if claim is None:
            if not (intent.actor or "").startswith(WRITER_PREFIX):
                return None  # not written under the claim protocol: nothing is proven
            return make(
                EventType.COMPENSATION_FAILED,
                error=(
                    "interrupted after COMPENSATION_INTENT and before the undo was called "
                    "(no claim was written); it is tried again"
                ),
                attributes={attr.REF_SEQ: str(seq), attr.CAUSE: "error"},
            )
        if claim.status is ClaimStatus.COMPENSATED:
            return make(
                EventType.COMPENSATED,
                result=claim.result,
                attributes={
                    attr.REF_SEQ: str(seq),
                    attr.RESULT_ENCODING: claim.result_encoding or "text",
                },
            )
        if claim.status is ClaimStatus.FAILED:
            return make(
                EventType.COMPENSATION_FAILED,
                error=claim.error or "the compensation failed",
                attributes={attr.REF_SEQ: str(seq), attr.CAUSE: "error"},
            )
        return None  # CLAIMED / TIMED_OUT: the call may have acted; the runner decides


def _step_claims(claims: Sequence[Claim], entries: Sequence[JournalEntry]) -> dict[int, Claim]:
    """Per ``EXECUTED`` seq of the chain, the claim of that very entry (its hash), else an
    unbound claim of its seq; a claim of another entry at the seq is none of the step's."""
    executed = {e.seq: e.hash for e in entries if e.event_type is EventType.EXECUTED}
    found: dict[int, Claim] = {}
    for claim in claims:
        if claim.unbound and claim.step_seq in executed:
            found.setdefault(claim.step_seq, claim)
        elif executed.get(claim.step_seq) == claim.step_hash:
            found[claim.step_seq] = claim  # the step's own claim wins over an unbound one
    return found
