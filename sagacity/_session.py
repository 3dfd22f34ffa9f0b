"""A saga whose runs are entered and left, and which is ended explicitly.

:meth:`Sagacity.saga <sagacity.Sagacity.saga>` runs one callable as one saga.  An agent-level
hook needs the same saga without a callable to hand: a framework's run starts in one hook and
ends in another, and a conversation spans several runs.  A :class:`SagaSession` is that saga:
:meth:`SagaSession.active` makes it the context's saga for a block (journaling
``SAGA_OPENED`` the first time), and :meth:`SagaSession.end` finishes it exactly as
``saga()`` finishes its run: compensated when a step failed or the run raised, awaiting
approval when a call is gated, completed otherwise.

Between runs the session keeps what its runs reported: after a failed step every further
call of the saga is refused, whichever run makes it, until the session ends and compensates.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from sagacity._result import SagaResult, SagaStatus
from sagacity._scope import SagaScope, activate
from sagacity.errors import SagaClosedError

if TYPE_CHECKING:
    from sagacity._saga import Sagacity


class SagaSession:
    """One saga entered by one or more runs and ended explicitly.

    Made by :meth:`Sagacity.session <sagacity.Sagacity.session>` (one saga per agent run) or
    :meth:`Sagacity.conversation <sagacity.Sagacity.conversation>` (one saga per
    conversation).  Thread-safe: runs of one conversation may enter it from several threads.
    """

    def __init__(self, sagacity: Sagacity, saga_id: str) -> None:
        self._sagacity = sagacity
        self._saga_id = saga_id
        self._lock = threading.Lock()
        self._scope: SagaScope | None = None
        self._result: SagaResult | None = None

    @property
    def saga_id(self) -> str:
        """The saga's id."""
        return self._saga_id

    @property
    def opened(self) -> bool:
        """``SAGA_OPENED`` is journaled (a run entered the session)."""
        with self._lock:
            return self._scope is not None

    @property
    def result(self) -> SagaResult | None:
        """The saga's outcome once :meth:`end` has run."""
        with self._lock:
            return self._result

    @property
    def scope(self) -> SagaScope | None:
        """What the session's runs reported so far (``None`` before the first run)."""
        with self._lock:
            return self._scope

    def _open(self) -> SagaScope:
        with self._lock:
            if self._result is not None:
                raise SagaClosedError(
                    f"saga {self._saga_id!r} has ended ({self._result.status.value}); start a "
                    "new session or conversation",
                    saga_id=self._saga_id,
                )
            if self._scope is None:
                self._sagacity._open(self._saga_id)
                self._scope = SagaScope(saga_id=self._saga_id, owner=self._sagacity)
            return self._scope

    @contextlib.contextmanager
    def active(self) -> Iterator[SagaScope]:
        """The session is the context's saga for the block; opened on first use.

        Raises:
            SagaClosedError: the session has ended.
            NestedSagaError: another saga is active in this context.
            SagaExistsError: the saga id is taken by a chain this session did not open.
        """
        with activate(self._open()) as scope:
            yield scope

    @contextlib.asynccontextmanager
    async def active_async(self) -> AsyncIterator[SagaScope]:
        """:meth:`active` for asyncio: opening the saga runs on a worker thread."""
        scope = await asyncio.to_thread(self._open)
        with activate(scope):
            yield scope

    def end(self, error: Exception | None = None) -> SagaResult:
        """End the saga: compensate it if a step failed or ``error`` is given, then journal
        ``SAGA_ENDED``.  Idempotent: a second call returns the first outcome.

        A session no run entered ends without a chain (its result is ``COMPLETED``).
        """
        with self._lock:
            if self._result is not None:
                return self._result
            scope = self._scope
        result = self._finish(scope, error)
        with self._lock:
            self._result = result
        return result

    async def end_async(self, error: Exception | None = None) -> SagaResult:
        """:meth:`end` for asyncio: compensations run on the loop, journal waits on a thread."""
        with self._lock:
            if self._result is not None:
                return self._result
            scope = self._scope
        host = self._sagacity
        if scope is None:
            result = self._finish(None, error)
        else:
            scope.close()
            if scope.lost is None and host._needs_compensation(scope, error):
                report = (
                    None
                    if host.compensation_mode == "delegated"
                    else await host._runner().run_async(scope.saga_id)
                )
                result = await asyncio.to_thread(host._end_failed, scope, None, error, report)
            else:
                result = await asyncio.to_thread(self._finish, scope, error)
        with self._lock:
            self._result = result
        return result

    def _finish(self, scope: SagaScope | None, error: Exception | None) -> SagaResult:
        host = self._sagacity
        if scope is None:
            return SagaResult(status=SagaStatus.COMPLETED, saga_id=self._saga_id, exception=error)
        scope.close()
        if scope.lost is not None:
            return host._end_lost(scope, error)
        if host._needs_compensation(scope, error):
            delegated = host.compensation_mode == "delegated"
            report = None if delegated else host._runner().run(scope.saga_id)
            return host._end_failed(scope, None, error, report)
        return host._end_clean(scope, None)
