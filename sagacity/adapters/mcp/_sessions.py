"""Which saga an MCP call journals into: one per session, or the one the client names.

docs/adr/0020-mcp-saga-scope.md.  A session's saga opens at its first call and ends when the
session goes away, after ``idle_timeout_s`` without a call, at a failed step (compensated at
once) or at a gated call (suspended for approval).  The next call then opens a new saga.

A saga belongs to the principal whose call opened it (its *owner*, kept with the open saga):
a call of another principal naming it, or arriving on its session, is refused.  Once the saga
is no longer open here — ended, or the server restarted — nobody joins it (the single-writer
rule); who opened a request stays on the chain as its ``caller``, which is what a resume checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sagacity.errors import SagaExistsError
from sagacity.saga._result import SagaResult
from sagacity.saga._run import SagaRun

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity

log = logging.getLogger("sagacity.mcp")


@dataclass(eq=False)
class _Slot:
    """The open saga of one key, and the lock that serialises its calls."""

    key: object
    session: weakref.ref[Any] | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    run: SagaRun | None = None
    last_used: float = field(default_factory=time.monotonic)
    hooked: bool = False
    """Whether the connection's close already ends this slot's saga."""
    owner: str | None = None
    """The principal whose call opened the slot (``None``: no principals, a stdio host)."""


class SessionSagas:
    """Open sagas by session (or by the saga id a client names), with an idle timeout.

    Args:
        sagacity: opens and ends the sagas.
        idle_timeout_s: a saga with no call for this long is ended by :meth:`sweep`.
        saga_prefix: the prefix of generated saga ids (``<prefix><32 hex digits>``).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        idle_timeout_s: float = 300.0,
        saga_prefix: str = "mcp-",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sagacity = sagacity
        self._idle = idle_timeout_s
        self._prefix = saga_prefix
        self._clock = clock
        self._slots: dict[object, _Slot] = {}

    @property
    def idle_timeout_s(self) -> float:
        """How long a saga may go without a call before it is ended."""
        return self._idle

    def open_sagas(self) -> list[str]:
        """The ids of the sagas open now."""
        return sorted(s.run.saga_id for s in self._slots.values() if s.run is not None)

    @contextlib.asynccontextmanager
    async def hold(
        self, *, session: object, saga_id: str | None, owner: str | None = None
    ) -> AsyncIterator[_Slot]:
        """The slot of ``session`` (or of the client-named ``saga_id``), locked for one call.

        The caller opens a run with :meth:`ensure_run` and ends it with :meth:`end` when the
        call failed or was gated.

        Raises:
            SagaExistsError: the slot is open for another principal than ``owner``.
        """
        key: object = ("saga", saga_id) if saga_id is not None else ("session", id(session))
        slot = self._slots.get(key)
        if slot is not None and slot.session is not None and slot.session() is not session:
            slot = None  # a new session reusing a dead one's id()
        if slot is None:
            ref = None
            if saga_id is None:
                with contextlib.suppress(TypeError):
                    ref = weakref.ref(session)
            slot = _Slot(key=key, session=ref, owner=owner)
            self._slots[key] = slot
        elif slot.owner != owner:
            what = f"saga {saga_id!r}" if saga_id is not None else "this session's saga"
            raise SagaExistsError(
                f"{what} was opened by another principal: a saga belongs to the principal "
                "that opened it; name a new saga",
                saga_id=saga_id or (slot.run.saga_id if slot.run is not None else None),
            )
        async with slot.lock:
            slot.last_used = self._clock()
            try:
                yield slot
            finally:
                slot.last_used = self._clock()

    async def ensure_run(self, slot: _Slot, saga_id: str | None) -> SagaRun:
        """The slot's open saga, opening one (the named saga, or a new id) if it has none.

        Raises:
            SagaExistsError: the named saga exists but is not open in this server (another
                writer's, or ended): the single-writer rule refuses to join it.
        """
        if slot.run is not None and not slot.run.ended:
            return slot.run
        name = saga_id or f"{self._prefix}{uuid.uuid4().hex}"
        try:
            # SAGA_OPENED now: a saga someone else holds is refused before any call runs.
            run = await asyncio.to_thread(self._sagacity.open_run, name)
        except SagaExistsError as exc:
            raise SagaExistsError(
                f"saga {name!r} exists and is not open in this server: a saga has one writer; "
                "name a new saga, or resume a gated call with sagacity/saga_id and sagacity/seq",
                saga_id=name,
            ) from exc
        slot.run = run
        return run

    async def end(self, slot: _Slot) -> None:
        """End the slot's run (if any) and forget the slot."""
        run, slot.run = slot.run, None
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        if run is not None:
            await run.end_async()

    async def cancel(self, saga_id: str, reason: str) -> SagaResult | None:
        """Stop the saga ``saga_id`` if it is open here: its run is cancelled and its completed
        steps compensated once (``None``: it is not open in this server)."""
        for slot in list(self._slots.values()):
            if slot.run is None or slot.run.saga_id != saga_id:
                continue
            async with slot.lock:
                run, slot.run = slot.run, None
                if self._slots.get(slot.key) is slot:
                    del self._slots[slot.key]
            if run is not None:
                return await run.cancel_async(reason)
        return None

    async def sweep(self) -> list[str]:
        """End the sagas of sessions gone away or idle too long; returns their ids."""
        now = self._clock()
        ended: list[str] = []
        for slot in list(self._slots.values()):
            gone = slot.session is not None and slot.session() is None
            if not gone and now - slot.last_used < self._idle:
                continue
            if slot.lock.locked():
                continue  # a call is in flight: it is not idle
            async with slot.lock:
                run = slot.run
                await self._end_quietly(slot)
                if run is not None:
                    ended.append(run.saga_id)
        return ended

    async def close(self) -> None:
        """End every open saga (the server is stopping)."""
        for slot in list(self._slots.values()):
            async with slot.lock:
                await self._end_quietly(slot)

    async def _end_quietly(self, slot: _Slot) -> None:
        saga_id = slot.run.saga_id if slot.run is not None else None
        try:
            await self.end(slot)
        except Exception:
            # The saga stays open on the chain; `sagacity saga sweep` hands it over.
            log.exception("could not end saga %s", saga_id)
