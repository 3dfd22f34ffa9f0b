"""The outcome of a saga run, a resume or a decision."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class SagaStatus(enum.StrEnum):
    """Where a saga stands after a run.

    ``COMPLETED``: every step ran.  ``COMPENSATED``: a step failed (or the work raised) and
    every executed step was undone.  ``COMPENSATION_FAILED``: some steps are still dirty (see
    :attr:`SagaResult.dirty` and :attr:`SagaResult.suspects`).  ``COMPENSATION_PENDING``:
    compensation was handed to the compensation service (``compensation="delegated"``).
    ``AWAITING_APPROVAL``: a gated call waits for a person.  ``REJECTED`` / ``EXPIRED``: the
    request was rejected or timed out and the executed steps were undone.
    """

    COMPLETED = "COMPLETED"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    COMPENSATION_PENDING = "COMPENSATION_PENDING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


@dataclass(frozen=True, kw_only=True)
class Step:
    """A step compensation could not clean up, for a person.

    Attributes:
        seq: the ``EXECUTED`` entry (for a dirty step) or the ``INTENT`` (for a suspect).
        tool: the tool.
        reason: why it is still dirty.
    """

    seq: int
    tool: str | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class SagaResult:
    """The outcome of :meth:`Sagacity.saga <sagacity.Sagacity.saga>` and of gate decisions.

    Attributes:
        status: see :class:`SagaStatus`.
        saga_id: the saga.
        value: what the work returned (``None`` when it raised).
        error: the failure that triggered compensation, as text.
        exception: the exception itself, when one was raised in this process.
        awaiting_tool_name / awaiting_seq: the first call waiting for approval.
        compensated: ``EXECUTED`` seqs undone by this compensation.
        dirty: steps left as they are (failed or impossible undo).
        suspects: ``INTENT`` entries without an outcome: an effect may exist.
    """

    status: SagaStatus
    saga_id: str
    value: Any = None
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    awaiting_tool_name: str | None = None
    awaiting_seq: int | None = None
    compensated: tuple[int, ...] = ()
    dirty: tuple[Step, ...] = ()
    suspects: tuple[Step, ...] = ()

    def summary(self) -> str:
        """A short text of the outcome, fit to feed back to a model or show a person."""
        saga = f"Saga {self.saga_id!r}"
        cause = f" after {self.error}" if self.error else ""
        undone = f"{len(self.compensated)} step(s) undone"
        if self.status is SagaStatus.COMPLETED:
            return f"{saga} completed."
        if self.status is SagaStatus.AWAITING_APPROVAL:
            return (
                f"{saga} is waiting for human approval of tool {self.awaiting_tool_name!r} "
                f"(seq {self.awaiting_seq}); it did not run."
            )
        if self.status is SagaStatus.COMPENSATION_PENDING:
            return f"{saga} stopped{cause}; compensation was handed to the compensation service."
        if self.status is SagaStatus.COMPENSATION_FAILED:
            left = [f"seq {s.seq} {s.tool} ({s.reason})" for s in self.dirty]
            left += [f"seq {s.seq} {s.tool} (suspect: {s.reason})" for s in self.suspects]
            return (
                f"{saga} stopped{cause}; compensation incomplete, {undone}; still dirty: "
                + "; ".join(left)
                + "."
            )
        verb = {
            SagaStatus.COMPENSATED: "stopped",
            SagaStatus.REJECTED: "was rejected",
            SagaStatus.EXPIRED: "expired awaiting approval",
        }[self.status]
        return f"{saga} {verb}{cause}; {undone}."
