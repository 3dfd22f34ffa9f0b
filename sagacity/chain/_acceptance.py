"""The acceptance rule: which event a saga's chain takes next (docs/adr/0004-single-writer.md).

Every reader of a saga gets its state through this rule and then the core's folds
(:mod:`sagacity.gate._requests`, :mod:`sagacity.gate._settlement`,
:mod:`sagacity.saga._outcome`): the journal's reader, the approvals service's projection and its
console and API, the resumers, the compensation service and replay
(docs/adr/0025-trust-model.md).  A reader that keeps its own rule is how a decoy gets shown as a
request.

The rule, for a message carrying a saga's key, in its partition's offset order: it is accepted
only if it sits on the partition its key maps to, its body names the key's saga, its content
hashes to its recorded hash, and it extends the accepted tail (its seq is the tail's plus one
and its ``prev_hash`` is the tail's hash).  The first such event at a seq wins; every other is
refused with a :class:`ForkKind` and never folded.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sagacity.chain import BreakReason, compute_hash
from sagacity.entries import _attributes as attr
from sagacity.entries._events import GENESIS_HASH, JournalEntry
from sagacity.errors import SerializationError
from sagacity.signing._writer_roles import SagaWriters, writer_refusal
from sagacity.signing._writer_signature import WriterRegistry


class ForkKind(enum.StrEnum):
    """Why an event with a saga's key was not accepted into its chain."""

    FORK = "fork"
    """A different event at a seq already taken, or one that does not extend the tail."""
    DUPLICATE = "duplicate"
    """The same event (same hash) as one already accepted."""
    EDITED = BreakReason.EDITED.value
    """Its content does not hash to its recorded hash (the chain's word for it)."""
    FOREIGN = "foreign"
    """Its body names another saga than its key."""
    WRONG_PARTITION = "wrong_partition"
    """It is not on the partition its key maps to: no reader of the saga's partition sees it,
    so no reader may take it."""
    UNKNOWN_PREFIX = "unknown_prefix"
    """Its saga's earlier events could not be read (gone from the topic, no archive holds
    them): whether it extends the chain cannot be told."""
    UNATTRIBUTED = "unattributed"
    """With a writer registry: its writer is not registered, or its signature header is
    missing or does not verify (docs/adr/0014 §4)."""
    WRITER_NOT_OWNER = "writer_not_owner"
    """With a writer registry: its (verified) writer may not write it into that saga: not the
    saga's owner, nor a service registered for that event type (docs/adr/0014 §5)."""
    STALE = "stale"
    """At a seq the chain has passed, where a reader that keeps only the tail (and the events
    it folds) cannot compare it with the accepted event: never folded, not reported by that
    reader (the archive and replay, which keep every hash, report it as a fork or duplicate)."""


QUIET = frozenset({ForkKind.DUPLICATE, ForkKind.STALE})
"""Refusals a projection drops without quarantining: the event is already in, or behind the
tail it keeps."""


@dataclass(frozen=True, kw_only=True)
class Tail:
    """The last accepted link of a saga: ``(0, genesis)`` before its first event, or an
    archive's retention anchor when its oldest events were dropped."""

    seq: int = 0
    hash: str = GENESIS_HASH


GENESIS = Tail()
"""The tail of a saga with no accepted event."""


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """Why an event was not accepted: a kind and a sentence for people."""

    kind: ForkKind
    detail: str


def intact(entry: JournalEntry) -> bool:
    """Whether ``entry``'s content hashes to its recorded hash."""
    try:
        return compute_hash(entry.prev_hash, entry, seq=entry.seq) == entry.hash
    except SerializationError:
        return False


def screen(saga_id: str, entry: JournalEntry, *, placed: bool = True) -> Refusal | None:
    """The checks that need no tail: the message's placement, its body's saga, its hash."""
    if not placed:
        return Refusal(
            kind=ForkKind.WRONG_PARTITION,
            detail="the message is not on the partition its key maps to",
        )
    if entry.saga_id != saga_id:
        return Refusal(kind=ForkKind.FOREIGN, detail="body names another saga")
    if not intact(entry):
        return Refusal(kind=ForkKind.EDITED, detail="content does not hash")
    return None


def judge(
    tail: Tail,
    saga_id: str,
    entry: JournalEntry,
    *,
    placed: bool = True,
    accepted_hash: Callable[[int], str | None] = lambda seq: None,
    taken_detail: Callable[[int], str | None] = lambda seq: None,
) -> Refusal | None:
    """``None`` when ``entry`` extends ``tail`` of ``saga_id``; else why it is refused.

    Args:
        tail: the saga's accepted tail before ``entry``.
        saga_id: the saga the message's key names.
        entry: the decoded event.
        placed: the message is on the partition its key maps to (the caller knows the topic's
            partition count; a reader of one partition always passes ``True``).
        accepted_hash: the hash of the accepted event at a seq at or before the tail, when the
            caller keeps it (tells a duplicate from a fork).
        taken_detail: a sentence saying where the accepted event at a seq is, when known.
    """
    screened = screen(saga_id, entry, placed=placed)
    if screened is not None:
        return screened
    if entry.seq == tail.seq + 1 and entry.prev_hash == tail.hash:
        return None
    if entry.seq <= tail.seq and accepted_hash(entry.seq) == entry.hash:
        return Refusal(kind=ForkKind.DUPLICATE, detail="already accepted")
    if entry.seq == tail.seq and entry.hash == tail.hash:
        return Refusal(kind=ForkKind.DUPLICATE, detail="already accepted")
    where = taken_detail(entry.seq) if entry.seq <= tail.seq else None
    detail = where or f"seq {entry.seq} does not extend the tail at seq {tail.seq}"
    return Refusal(kind=ForkKind.FORK, detail=detail)


def admit(
    tail: Tail | None,
    saga_id: str,
    entry: JournalEntry,
    *,
    placed: bool = True,
    prefix: Callable[[], Tail | None] | None = None,
    known_hash: Callable[[int], str | None] = lambda seq: None,
) -> Refusal | None:
    """The acceptance rule for a reader that keeps each saga's tail, not its whole chain (a
    projection folding the topic): ``None`` when ``entry`` is the saga's next event.

    Args:
        tail: the saga's stored tail; ``None`` when the reader has seen none of its events.
        saga_id / entry / placed: as :func:`judge`.
        prefix: for a saga first seen past its first event, its tail before ``entry`` read
            from the journal (``None``: it cannot be read); without it such an event is
            refused :attr:`ForkKind.UNKNOWN_PREFIX`.
        known_hash: the accepted hash at a seq behind the tail, where the reader kept it (the
            events it folds): an event there is then a duplicate or a fork, else
            :attr:`ForkKind.STALE`.
    """
    screened = screen(saga_id, entry, placed=placed)
    if screened is not None:
        return screened
    if tail is None:
        tail = GENESIS if entry.seq == 1 else (prefix() if prefix is not None else None)
        if tail is None:
            return Refusal(
                kind=ForkKind.UNKNOWN_PREFIX,
                detail=f"the saga's events before seq {entry.seq} could not be read",
            )
    if entry.seq < tail.seq and known_hash(entry.seq) is None:
        return Refusal(
            kind=ForkKind.STALE,
            detail=f"seq {entry.seq} is behind the accepted tail (seq {tail.seq})",
        )

    def accepted(seq: int) -> str | None:
        return tail.hash if tail is not None and seq == tail.seq else known_hash(seq)

    return judge(tail, saga_id, entry, accepted_hash=accepted)


REGISTRY_KINDS = frozenset({ForkKind.UNATTRIBUTED, ForkKind.WRITER_NOT_OWNER})
"""Refusals only a reader with a writer registry gives."""


def attributed(
    registry: WriterRegistry,
    writers: SagaWriters,
    entry: JournalEntry,
    signature: bytes | None,
) -> Refusal | None:
    """With a writer registry, the acceptance rule's last clause: ``None`` when ``entry`` (an
    event that extends its saga's tail) was written by a registered writer whose signature
    (the ``sagacity_writer_sig`` header, ``signature``) verifies, and that writer may write it
    into the saga whose accepted chain so far folds to ``writers``
    (:func:`sagacity.signing._writer_roles.writer_refusal`); else why not."""
    writer = entry.attributes.get(attr.WRITER)
    refused = registry.check(
        writer=writer, saga_id=entry.saga_id, seq=entry.seq, hash=entry.hash, signature=signature
    )
    if refused is not None:
        reason, detail = refused
        return Refusal(kind=ForkKind.UNATTRIBUTED, detail=f"{reason}: {detail}")
    registered = registry.registered(writer)
    assert registered is not None  # the check above found it
    role = writer_refusal(registered, writers, _Written(entry))
    if role is not None:
        return Refusal(kind=ForkKind.WRITER_NOT_OWNER, detail=role[1])
    return None


def writers_after(writers: SagaWriters, entry: JournalEntry) -> SagaWriters:
    """The saga's writers once ``entry`` is accepted into its chain."""
    return writers.after(_Written(entry))


class _Written:
    """An entry as :func:`~sagacity.signing._writer_roles.writer_refusal` reads it."""

    __slots__ = ("_entry",)

    def __init__(self, entry: JournalEntry) -> None:
        self._entry = entry

    @property
    def event_type(self) -> str:
        return self._entry.event_type.value

    @property
    def actor(self) -> str | None:
        return self._entry.actor

    @property
    def attributes(self) -> Mapping[str, str]:
        return self._entry.attributes
