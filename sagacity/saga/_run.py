"""``SagaRun``: a saga held open across calls that arrive one at a time.

:meth:`Sagacity.saga` runs one function as a saga.  Where the calls of a unit of work arrive
separately — the requests of an MCP session, the turns of a conversation — the saga is opened
once, each call joins it, and it is ended explicitly (or by its owner's idle timeout).  The
outcome rules are those of :meth:`Sagacity.saga`: a failed step is compensated, a gated call
leaves the saga ``AWAITING_APPROVAL``, otherwise it completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from sagacity.effects._effects import EffectIndex
from sagacity.errors import SagaCancelledError
from sagacity.saga._result import SagaResult
from sagacity.saga._scope import Failure, Gate, SagaScope, joined_scope
from sagacity.telemetry import _tracing

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity

T = TypeVar("T")


class SagaRun:
    """One open saga whose calls arrive one at a time; made by :meth:`Sagacity.open_run`.

    Calls must not overlap :meth:`end` (the owner serialises them); calls made after the end
    raise :class:`~sagacity.errors.SagaClosedError` without running.
    """

    def __init__(
        self, owner: Sagacity, saga_id: str, *, effects: EffectIndex | None = None
    ) -> None:
        self._owner = owner
        self._scope = SagaScope(saga_id=saga_id, owner=owner, effects=effects or EffectIndex())
        self._lock = threading.Lock()
        self._result: SagaResult | None = None

    @property
    def saga_id(self) -> str:
        """The saga's id."""
        return self._scope.saga_id

    @property
    def scope(self) -> SagaScope:
        """The saga's scope (what its calls join)."""
        return self._scope

    @property
    def failure(self) -> Failure | None:
        """The first failed step, if any (the saga will be compensated at its end)."""
        return self._scope.failure

    @property
    def gates(self) -> tuple[Gate, ...]:
        """Calls suspended for approval so far."""
        return self._scope.gates

    @property
    def lost(self) -> str | None:
        """Why another writer holds the saga now, if one took it over."""
        return self._scope.lost

    @property
    def ended(self) -> bool:
        """Whether :meth:`end` has run."""
        return self._scope.closed

    @contextlib.contextmanager
    def joined(self) -> Iterator[SagaScope]:
        """The saga is the context's for the block: :meth:`call` for code that is not one
        callable (an agent-level hook around a framework's handler).

        Raises:
            SagaClosedError: the run has ended.
            NestedSagaError: another saga is active in this context.
        """
        with joined_scope(self._scope) as scope:
            yield scope

    def call(self, work: Callable[[], T]) -> T:
        """Run ``work()`` inside the saga: the wrapped tools it calls are journaled in it.

        Raises:
            SagaClosedError: the run has ended.
            NestedSagaError: another saga is active in this context.
        """
        with joined_scope(self._scope):
            return work()

    async def call_async(self, work: Callable[[], Awaitable[T]]) -> T:
        """:meth:`call` for asyncio: ``work()`` is awaited inside the saga."""
        with joined_scope(self._scope):
            return await work()

    def end(self, error: Exception | None = None) -> SagaResult:
        """End the saga: compensate it if a step failed (or ``error``, what ended the work,
        is given), else journal its end.  Idempotent: a second call returns the outcome.

        Raises:
            JournalError: the journal could not record the end (the run stays ended; a
                compensation sweep or :meth:`Sagacity.compensate` finishes the saga).
        """
        with self._lock:
            if self._result is not None:
                return self._result
            self._scope.close()
            self._result = self._owner.finish_run(self._scope, None, error)
            if _tracing.tracer is not None:
                _tracing.tracer.run_ended(self._scope, self._result)
            return self._result

    async def end_async(self, error: Exception | None = None) -> SagaResult:
        """:meth:`end` on a worker thread, so the event loop is never blocked."""
        return await asyncio.to_thread(self.end, error)

    def cancel(self, reason: str = "cancelled") -> SagaResult:
        """End the saga because its work was cancelled (the agent's cancellation, a kill
        switch): its completed steps are compensated, once (:meth:`end` is idempotent)."""
        return self.end(SagaCancelledError(f"saga {self.saga_id!r}: {reason}"))

    async def cancel_async(self, reason: str = "cancelled") -> SagaResult:
        """:meth:`cancel` on a worker thread, shielded from a second cancellation."""
        return await asyncio.shield(asyncio.to_thread(self.cancel, reason))

    def __repr__(self) -> str:
        return f"SagaRun({self.saga_id!r}, ended={self.ended})"
