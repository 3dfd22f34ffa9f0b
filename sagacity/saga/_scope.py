"""The active saga, carried by ``contextvars``.

A ``ContextVar`` follows the code that runs for a saga wherever the interpreter takes its
context: the opening thread, asyncio tasks (which copy the context when created, so tasks
spawned inside a saga journal into it), ``asyncio.to_thread`` and ``contextvars.copy_context``.
A tool called where no saga is active runs straight through, unjournaled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from sagacity.effects._effects import EffectIndex
from sagacity.errors import NestedSagaError, SagaClosedError


@dataclass(frozen=True, kw_only=True)
class Gate:
    """A call suspended for approval in this run."""

    tool: str
    seq: int


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A step that failed in this run."""

    tool: str | None
    seq: int | None
    error: str
    key: str | None = None
    """The failed call's effect key (its digest), when its tool has one."""


@dataclass(eq=False)
class SagaScope:
    """One run of a saga: its id and what its tools reported.  Thread-safe.

    Tools may report from several threads (``asyncio.to_thread``) or tasks at once, hence the
    lock.  ``closed`` is set when the run ends: a task that outlives its saga must not journal
    into a chain whose outcome is already decided.
    """

    saga_id: str
    owner: object
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _gates: list[Gate] = field(default_factory=list)
    _failures: list[Failure] = field(default_factory=list)
    _lost: str | None = None
    _closed: bool = False
    _redacted: set[str] = field(default_factory=set, repr=False)
    effects: EffectIndex = field(default_factory=EffectIndex, repr=False)
    """The effect keys of the run's calls (docs/adr/0026-effects-and-refusals.md)."""

    def note_redacted(self, texts: frozenset[str]) -> None:
        """Remember the texts of values a call of this run redacted: masked in every outcome
        and in the run's end (docs/adr/0019-erasure.md §5)."""
        if texts:
            with self._lock:
                self._redacted |= texts

    @property
    def redacted(self) -> frozenset[str]:
        """The texts of the values this run's calls redacted so far."""
        with self._lock:
            return frozenset(self._redacted)

    def mark_lost(self, reason: str) -> None:
        """Record that the journal refused this run's writes: another writer took the saga
        (the first reason is kept).  The run journals nothing more."""
        with self._lock:
            if self._lost is None:
                self._lost = reason

    @property
    def lost(self) -> str | None:
        """Why this run no longer holds its saga, if it lost it."""
        with self._lock:
            return self._lost

    def mark_failed(
        self, *, tool: str | None, seq: int | None, error: str, key: str | None = None
    ) -> None:
        """Record a failed step: the run compensates at its end unless it is recovered."""
        with self._lock:
            self._failures.append(Failure(tool=tool, seq=seq, error=error, key=key))

    def mark_succeeded(self, tool: str, key: str | None) -> tuple[int, ...]:
        """A call of ``tool`` (effect key ``key``) succeeded: the failures it recovers (earlier
        failures of the same tool, with the same key where it has one) no longer make the run
        compensate.  Returns their seqs."""
        with self._lock:
            recovered = [
                f for f in self._failures if f.tool == tool and (f.key is None or f.key == key)
            ]
            self._failures = [f for f in self._failures if f not in recovered]
        return tuple(f.seq for f in recovered if f.seq is not None)

    def blocking(self, tool: str, *, reads: bool) -> Failure | None:
        """The failure that keeps a call of ``tool`` from running (``None``: it may run).

        While a failure is not recovered, only a retry of a failed tool and reads
        (``reads``: the tool is ``READ``) run: anything else would only be undone.
        """
        with self._lock:
            if not self._failures or reads or any(f.tool == tool for f in self._failures):
                return None
            return self._failures[0]

    def mark_awaiting(self, *, tool: str, seq: int) -> None:
        """Record a call suspended for human approval."""
        with self._lock:
            self._gates.append(Gate(tool=tool, seq=seq))

    @property
    def failures(self) -> tuple[Failure, ...]:
        """The failed steps not recovered since, in order."""
        with self._lock:
            return tuple(self._failures)

    @property
    def failure(self) -> Failure | None:
        """The first failed step not recovered since, if any."""
        with self._lock:
            return self._failures[0] if self._failures else None

    @property
    def gates(self) -> tuple[Gate, ...]:
        """Calls suspended for approval, in order."""
        with self._lock:
            return tuple(self._gates)

    @property
    def closed(self) -> bool:
        """The run has ended."""
        with self._lock:
            return self._closed

    def close(self) -> None:
        """End the run."""
        with self._lock:
            self._closed = True


_current: ContextVar[SagaScope | None] = ContextVar("sagacity_saga_scope", default=None)
_caller: ContextVar[str | None] = ContextVar("sagacity_caller", default=None)


def current_caller() -> str | None:
    """The authenticated principal the tool calls in this context come from, if known."""
    return _caller.get()


@contextlib.contextmanager
def calling_as(principal: str | None) -> Iterator[None]:
    """Journal the calls made in the block as coming from ``principal`` (``None``: unknown)."""
    token = _caller.set(principal)
    try:
        yield
    finally:
        _caller.reset(token)


def current_scope() -> SagaScope | None:
    """The saga active in this context (possibly already closed), if any."""
    return _current.get()


def ensure_no_active_scope(saga_id: str) -> None:
    """Refuse to start ``saga_id`` inside another active saga.

    Raises:
        NestedSagaError: a saga is already active in this context.
    """
    active = _current.get()
    if active is not None and not active.closed:
        raise NestedSagaError(
            f"saga {saga_id!r} cannot start inside saga {active.saga_id!r}: sagas do not "
            "nest; finish the outer saga first",
            saga_id=saga_id,
        )


@contextlib.contextmanager
def open_scope(saga_id: str, owner: object) -> Iterator[SagaScope]:
    """Make a saga active for the duration of the block; always closed on exit.

    Raises:
        NestedSagaError: a saga is already active in this context.
    """
    ensure_no_active_scope(saga_id)
    scope = SagaScope(saga_id=saga_id, owner=owner)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        scope.close()
        _current.reset(token)


@contextlib.contextmanager
def joined_scope(scope: SagaScope) -> Iterator[SagaScope]:
    """Make an already open run's ``scope`` active for the block, without ending it.

    For a saga whose calls arrive one at a time (:class:`~sagacity.SagaRun`): each call joins
    the run's scope and leaves it open for the next.

    Raises:
        NestedSagaError: another saga is already active in this context.
        SagaClosedError: the run has ended.
    """
    active = _current.get()
    if active is not None and active is not scope and not active.closed:
        raise NestedSagaError(
            f"saga {scope.saga_id!r} cannot run inside saga {active.saga_id!r}: sagas do not "
            "nest; finish the outer saga first",
            saga_id=scope.saga_id,
        )
    if scope.closed:
        raise SagaClosedError(f"saga {scope.saga_id!r} has ended", saga_id=scope.saga_id)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
