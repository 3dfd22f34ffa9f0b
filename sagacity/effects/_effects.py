"""Which effects a saga run's calls already have: its effect keys, folded from the chain.

The saga's chain is the truth, and a writer holds only a saga's head, never its chain
(docs/adr/0004-single-writer.md).  So each run keeps a small map of its effect keys
(:class:`EffectIndex`): empty for a saga it opens, folded from the chain once when it continues
a saga it held before (:meth:`EffectIndex.from_chain`), and kept up to date by its own calls.
Each record holds digests and seqs, never a result or a payload, so a conversation's map stays
small however long it runs; the recorded result of an effect is read back from the chain when
a call replays it (rare by design).

A key is compared in clear in this process (:mod:`sagacity.effects._effect_keys`); a record folded
from the chain whose payload has redacted fields cannot be compared in clear (the values are
not on the chain), so a new call is redacted with that record's salts and compared in its
journaled form.

What a record may say (:class:`EffectState`): an approval request is open for the effect, a
call of it is running in this run, it executed, or its ``INTENT`` has no outcome and the run
that made it is gone (in doubt).  A failed or refused call leaves no record: its key is free.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sagacity.effects._effect_keys import arguments_digest, journaled_document
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import SerializationError
from sagacity.gate._requests import AWAITING_RESULT, ref_of
from sagacity.privacy._redaction import canonical_json, redact, stored_salts
from sagacity.tools._decorators import ToolDefinition
from sagacity.tools._registry import ToolRegistry

_DECIDED = frozenset(
    {
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.RESUME_REFUSED,
        EventType.CONSTRAINT_VIOLATED,
    }
)


class EffectState(enum.Enum):
    """What the chain (or this run) says of one effect."""

    REQUESTED = "requested"
    """An approval request for it is open (``seq``: the request)."""
    RUNNING = "running"
    """Its ``INTENT`` is journaled and its call has not returned (``seq``: the ``INTENT``)."""
    EXECUTED = "executed"
    """Its call executed (``seq``: the ``INTENT``, ``outcome``: the ``EXECUTED``)."""
    DOUBT = "doubt"
    """Its ``INTENT`` has no outcome and the run that made it is gone (``seq``: the ``INTENT``)."""


@dataclass(kw_only=True, eq=False)
class EffectRecord:
    """One effect of the saga, under its key."""

    tool: str
    state: EffectState
    seq: int = 0
    outcome: int | None = None
    key: str | None = None
    """The key's digest in clear (``None``: compared in its journaled form)."""
    arguments: str | None = None
    """The whole arguments' digest in clear (``None``: compared in their journaled form)."""
    journaled: Mapping[str, Any] | None = None
    """The journaled payload of a record compared in its journaled form."""
    salts: Mapping[str, str] = field(default_factory=dict)
    """That payload's redaction salts."""
    suspected: bool = False
    """A ``SUSPECT`` doubts its ``INTENT`` already."""
    intent: JournalEntry | None = None
    """The effect's ``INTENT`` (what a ``SUSPECT`` of a record in doubt repeats)."""
    request: int | None = None
    """The approval request the effect came from, if it was gated."""


@dataclass(frozen=True, kw_only=True)
class EffectHit:
    """A call whose key an earlier call of the saga has: ``record``, with the same
    arguments or not."""

    record: EffectRecord
    same_arguments: bool


class EffectClaim:
    """A call's hold on a key it is the first to use (made by :meth:`EffectIndex.claim`);
    it reports what became of the call."""

    def __init__(self, index: EffectIndex, record: EffectRecord) -> None:
        self._index = index
        self.record = record

    def requested(self, seq: int) -> None:
        """An approval request at ``seq`` stands for the effect."""
        self._index.set(self.record, EffectState.REQUESTED, seq)

    def started(self, seq: int) -> None:
        """The call's ``INTENT`` is at ``seq``."""
        self._index.set(self.record, EffectState.RUNNING, seq)

    def executed(self, seq: int) -> None:
        """The call's ``EXECUTED`` is at ``seq``."""
        self._index.set(self.record, EffectState.EXECUTED, self.record.seq, outcome=seq)

    def in_doubt(self, intent: JournalEntry) -> None:
        """The call ran but its outcome could not be journaled: the chain shows it in doubt."""
        self.record.intent = intent
        self._index.set(self.record, EffectState.DOUBT, intent.seq)

    def release(self) -> None:
        """The call failed, refused or never ran: the key is free again."""
        self._index.drop(self.record)


class EffectIndex:
    """The effect keys of one saga run; thread-safe (tools may run in several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clear: dict[str, EffectRecord] = {}
        self._journaled: dict[str, list[EffectRecord]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._clear) + sum(len(r) for r in self._journaled.values())

    # -- the hot path ---------------------------------------------------------------------
    def claim(self, definition: ToolDefinition, payload: str) -> EffectHit | EffectClaim | None:
        """The earlier call with the key of this call of ``definition`` (``payload``: its
        arguments in clear), or a claim on the key for this call (``None``: no key).

        Raises:
            SerializationError: the payload is not a JSON object.
        """
        key = definition.key
        if key is None:
            return None
        document = journaled_document(payload)
        if document is None:
            raise SerializationError(f"the payload of tool {definition.name!r} is not an object")
        digest = key.digest(definition.name, document)
        arguments = arguments_digest(definition.name, document)
        with self._lock:
            record = self._clear.get(digest)
            if record is not None:
                return EffectHit(record=record, same_arguments=record.arguments == arguments)
            for earlier in self._journaled.get(definition.name, ()):
                hit = _journaled_hit(definition, earlier, payload)
                if hit is not None:
                    return hit
            record = EffectRecord(
                tool=definition.name, state=EffectState.RUNNING, key=digest, arguments=arguments
            )
            self._clear[digest] = record
            return EffectClaim(self, record)

    def set(
        self, record: EffectRecord, state: EffectState, seq: int, *, outcome: int | None = None
    ) -> None:
        """Record what became of ``record``'s effect."""
        with self._lock:
            record.state, record.seq, record.outcome = state, seq, outcome

    def mark_suspected(self, record: EffectRecord) -> None:
        """A ``SUSPECT`` now doubts ``record``'s ``INTENT``."""
        with self._lock:
            record.suspected = True

    def drop(self, record: EffectRecord) -> None:
        """Forget ``record``: its key is free."""
        with self._lock:
            self._drop(record)

    def _drop(self, record: EffectRecord) -> None:
        if record.key is not None and self._clear.get(record.key) is record:
            del self._clear[record.key]
        kept = self._journaled.get(record.tool)
        if kept is not None and record in kept:
            kept.remove(record)

    # -- the chain ------------------------------------------------------------------------
    @classmethod
    def from_chain(cls, entries: Iterable[JournalEntry], registry: ToolRegistry) -> EffectIndex:
        """The effects of a saga this process continues: its chain folded by the registry's
        own declarations of the keys.  An ``INTENT`` without an outcome is in doubt: the run
        that journaled it is gone."""
        index = cls()
        for record in _fold(entries, registry).values():
            if record.state is EffectState.RUNNING:
                record.state = EffectState.DOUBT
            index._keep(record)
        return index

    def refresh(self, entries: Iterable[JournalEntry], registry: ToolRegistry) -> None:
        """Bring the records of open approval requests up to the chain: another process
        decides on them, resumes and runs them."""
        by_request = {
            r.request: r for r in _fold(entries, registry).values() if r.request is not None
        }
        with self._lock:
            everything = [*self._clear.values()]
            everything.extend(r for kept in self._journaled.values() for r in kept)
            for record in everything:
                if record.state is not EffectState.REQUESTED:
                    continue
                now = by_request.get(record.seq)
                if now is None:
                    self._drop(record)  # decided against, failed, or the saga moved on
                    continue
                record.state, record.seq, record.outcome = now.state, now.seq, now.outcome
                record.suspected, record.intent = now.suspected, now.intent

    def _keep(self, record: EffectRecord) -> None:
        with self._lock:
            if record.key is not None:
                self._clear[record.key] = record
            else:
                self._journaled.setdefault(record.tool, []).append(record)


def _journaled_hit(
    definition: ToolDefinition, record: EffectRecord, payload: str
) -> EffectHit | None:
    """Compare a call (``payload`` in clear) with a record known only in its journaled form:
    the call redacted with the record's salts is what the record's call would have journaled
    with the same values."""
    key = definition.key
    if key is None or record.journaled is None:
        return None
    try:
        redacted = redact(definition.name, payload, definition.redact, record.salts)
        again = journaled_document(redacted.payload)
        if again is None or key.material(again) != key.material(record.journaled):
            return None
        same = canonical_json(again) == canonical_json(dict(record.journaled))
    except SerializationError:
        return None
    return EffectHit(record=record, same_arguments=same)


def _record(
    definition: ToolDefinition, entry: JournalEntry, state: EffectState
) -> EffectRecord | None:
    key = definition.key
    document = journaled_document(entry.payload)
    if key is None or document is None:
        return None
    salts = stored_salts(entry.attributes.get(attr.REDACTION))
    record = EffectRecord(tool=definition.name, state=state, seq=entry.seq)
    try:
        if definition.redact and salts:
            record.journaled, record.salts = document, salts
        else:
            record.key = key.digest(definition.name, document)
            record.arguments = arguments_digest(definition.name, document)
    except SerializationError:
        return None
    return record


def _fold(entries: Iterable[JournalEntry], registry: ToolRegistry) -> dict[int, EffectRecord]:
    """Every keyed effect on the chain, by the seq of its call (its request, or its
    ``INTENT``), read with the registry's own declarations of the keys."""
    calls: dict[int, EffectRecord] = {}
    for entry in entries:
        kind, ref = entry.event_type, ref_of(entry)
        if kind is EventType.AWAITING_APPROVAL or kind is EventType.INTENT:
            tool = registry.get(entry.tool or "")
            requested = kind is EventType.AWAITING_APPROVAL
            resumed = calls.pop(ref, None) if not requested and ref is not None else None
            state = EffectState.REQUESTED if requested else EffectState.RUNNING
            record = _record(tool.definition, entry, state) if tool is not None else None
            if record is not None:
                record.intent = None if requested else entry
                record.request = entry.seq if requested else None
                if resumed is not None:
                    record.request = resumed.request
                calls[entry.seq] = record
        elif kind is EventType.COMPENSATION_REQUESTED or (
            kind is EventType.SAGA_ENDED and entry.result != AWAITING_RESULT
        ):  # the end of the saga's open requests
            for seq in [s for s, r in calls.items() if r.state is EffectState.REQUESTED]:
                del calls[seq]
        elif ref is None or ref not in calls:
            continue
        elif kind is EventType.EXECUTED:
            calls[ref].state, calls[ref].outcome = EffectState.EXECUTED, entry.seq
        elif kind is EventType.FAILED or kind in _DECIDED:
            del calls[ref]
        elif kind is EventType.SUSPECT:
            calls[ref].suspected = True
    return calls
