"""How a saga ends: compensated from its chain, its end journaled, its outcome read back.

The part of :class:`~sagacity.Sagacity` its runs, the approval gate (:mod:`sagacity.gate._approval`,
:mod:`sagacity.gate._resume`) and the suspect desk (:mod:`sagacity.gate._settlement`) share: the
compensation runner over the saga's chain, ``end_saga`` (``COMPENSATION_REQUESTED`` when
delegated, ``SAGA_ENDED`` always) and the outcome as the chain records it.  ``Sagacity``
inherits it; its state is ``Sagacity``'s own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType
from sagacity.entries._oversize import append_bounded
from sagacity.errors import OutcomeTimeoutError
from sagacity.gate._approval import load_chain
from sagacity.journal import Journal
from sagacity.saga._outcome import outcome_from_chain
from sagacity.saga._result import SagaResult, SagaStatus
from sagacity.tools._registry import ToolRegistry
from sagacity.undo._compensation import CompensationCall, CompensationReport, CompensationRunner

if TYPE_CHECKING:
    from sagacity.gate._approval import ApprovalDesk


class SagaEnds:
    """Compensating and ending sagas; a part of :class:`~sagacity.Sagacity`."""

    _journal: Journal
    _registry: ToolRegistry
    _writer_id: str
    _clock: Callable[[], int]
    _desk: ApprovalDesk

    def _runner(
        self, invoke: Callable[[CompensationCall], Any] | None = None
    ) -> CompensationRunner:
        return CompensationRunner(
            self._journal,
            self._registry,
            actor=self._writer_id,
            clock=self._clock,
            invoke=invoke,
            settlement_counts=self._desk.settlement_counts,
        )

    def _draft(self, saga_id: str, event: EventType, **fields: Any) -> EntryDraft:
        fields.setdefault("actor", self._writer_id)
        return EntryDraft(saga_id=saga_id, event_type=event, recorded_at_us=self._clock(), **fields)

    def end_saga(
        self,
        saga_id: str,
        *,
        cause: EventType,
        ref_seq: int | None,
        error: str | None,
        clean_status: SagaStatus,
        report: CompensationReport | None,
        value: Any = None,
        exception: BaseException | None = None,
        redacted: Collection[str] = (),
    ) -> SagaResult:
        """Finish a saga that must be undone: journal the request or the compensation's end.

        ``report`` is the inline compensation's outcome (``None`` in delegated mode, where
        ``COMPENSATION_REQUESTED`` is journaled instead).  Journals ``SAGA_ENDED`` and flushes.
        ``redacted``: texts of the values the run redacted, masked in what is journaled.
        """
        if report is None:
            attributes = {attr.REASON: cause.value}
            if ref_seq is not None:
                attributes[attr.REF_SEQ] = str(ref_seq)
            append_bounded(
                self._journal,
                self._draft(
                    saga_id, EventType.COMPENSATION_REQUESTED, error=error, attributes=attributes
                ),
                durable=True,
                redacted=redacted,
            )
            status = SagaStatus.COMPENSATION_PENDING
        else:
            status = clean_status if report.status is SagaStatus.COMPENSATED else report.status
        ended: dict[str, str] = {}
        if report is not None and (report.dirty or report.suspects):
            ended[attr.DIRTY] = "; ".join(
                [f"seq {s.seq} {s.tool}: {s.reason}" for s in report.dirty]
                + [f"seq {s.seq} {s.tool}: suspect: {s.reason}" for s in report.suspects]
            )
        append_bounded(
            self._journal,
            self._draft(
                saga_id, EventType.SAGA_ENDED, result=status.value, error=error, attributes=ended
            ),
            durable=True,
            redacted=redacted,
        )
        self._journal.flush()
        return SagaResult(
            status=status,
            saga_id=saga_id,
            value=value,
            error=error,
            exception=exception,
            compensated=report.compensated if report else (),
            dirty=report.dirty if report else (),
            suspects=report.suspects if report else (),
        )

    def compensate(
        self,
        saga_id: str,
        *,
        reason: EventType = EventType.FAILED,
        error: str | None = None,
        invoke: Callable[[CompensationCall], Any] | None = None,
    ) -> SagaResult:
        """Run compensation for ``saga_id`` from its chain and end it (``SAGA_ENDED``).

        What the compensation service calls on ``COMPENSATION_REQUESTED``, and what a person
        runs to finish a saga interrupted mid-way.  Safe to repeat: steps already compensated
        are skipped.  When anything is left dirty, ``SAGA_ENDED`` names it in its ``dirty``
        attribute.

        Args:
            reason: the event that made compensation necessary (``REJECTED`` / ``EXPIRED``
                end a clean compensation with that status).
            error: the failure that caused it, recorded on ``SAGA_ENDED``.
            invoke: makes each undo call (see :class:`CompensationRunner`); a service passes
                one that adds a timeout or an idempotency claim.

        Raises:
            UnknownSagaError: the saga has no entries.
            ChainIntegrityError: the chain does not verify.
            CompensationConflictError: the saga is being compensated elsewhere right now.
        """
        entries = load_chain(self._journal, saga_id)
        report = self._runner(invoke).run(saga_id, entries)
        clean = {
            EventType.REJECTED: SagaStatus.REJECTED,
            EventType.EXPIRED: SagaStatus.EXPIRED,
        }.get(reason, SagaStatus.COMPENSATED)
        return self.end_saga(
            saga_id, cause=reason, ref_seq=None, error=error, clean_status=clean, report=report
        )

    def outcome(self, saga_id: str) -> SagaResult | None:
        """The saga's outcome as its chain records it (``None`` while no run has ended).

        Raises:
            UnknownSagaError: the saga has no entries.
        """
        return outcome_from_chain(load_chain(self._journal, saga_id))

    def wait_for_outcome(
        self, saga_id: str, *, timeout: float = 30.0, poll_interval: float = 0.05
    ) -> SagaResult:
        """Wait until the saga's outcome is final (not ``COMPENSATION_PENDING``) and return it.

        For callers in delegated mode: the compensation service journals the end.

        Raises:
            OutcomeTimeoutError: still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self._final_outcome(saga_id)
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise self._outcome_timeout(saga_id, timeout)
            time.sleep(poll_interval)

    async def wait_for_outcome_async(
        self, saga_id: str, *, timeout: float = 30.0, poll_interval: float = 0.05
    ) -> SagaResult:
        """:meth:`wait_for_outcome` without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while True:
            result = self._final_outcome(saga_id)
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise self._outcome_timeout(saga_id, timeout)
            await asyncio.sleep(poll_interval)

    def _final_outcome(self, saga_id: str) -> SagaResult | None:
        entries = self._journal.entries(saga_id)
        result = outcome_from_chain(entries) if entries else None
        if result is None or result.status is SagaStatus.COMPENSATION_PENDING:
            return None
        return result

    @staticmethod
    def _outcome_timeout(saga_id: str, timeout: float) -> OutcomeTimeoutError:
        return OutcomeTimeoutError(
            f"saga {saga_id!r} has no final outcome after {timeout:g}s", saga_id=saga_id
        )

    def compensation_report(self, saga_id: str) -> CompensationReport:
        """Run the compensation runner only (no ``SAGA_ENDED``); for services and tests."""
        return self._runner().run(saga_id)
