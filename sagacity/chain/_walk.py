"""The walk of a stored chain and the one vocabulary of a break (docs/adr/0002-hash-chain.md,
"What a verifier reports").

:func:`link_break` is the rule every Python walker applies to the next stored entry (the
reference :func:`verify`, the column fast path's twin in :mod:`sagacity.chain._fastverify`,
and through them the audit and the bulk verifier); the compiled walker (``native/src/verify.rs``)
and the standalone verifier keep their ports of it, and ``tests/conformance/`` runs all three
over the same vectors.  :class:`BreakReason` names a break; every other vocabulary that names
one (the audit's, ingest's quarantine) takes its words from here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sagacity.chain._form import compute_hash
from sagacity.entries._events import GENESIS_HASH, JournalEntry
from sagacity.errors import SerializationError


class BreakReason(enum.StrEnum):
    """Why a chain does not verify, at the first bad seq."""

    WRONG_GENESIS = "wrong_genesis"
    """Seq 1's ``prev_hash`` is not the genesis hash."""
    GAP = "gap"
    """A seq is missing (the entry found has a higher seq than expected and the expected seq
    appears nowhere later)."""
    REORDERED = "reordered"
    """An entry is out of order: its seq is lower than expected or repeated, or higher while
    the expected seq is stored later (a swap)."""
    BROKEN_LINK = "broken_link"
    """An entry's ``prev_hash`` is not the previous entry's hash."""
    EDITED = "edited"
    """An entry's content does not hash to its recorded hash."""
    FOREIGN_SAGA = "foreign_saga"
    """An entry belongs to another saga."""


@dataclass(frozen=True, kw_only=True)
class ChainVerdict:
    """The outcome of :func:`verify`.

    Attributes:
        ok: the whole chain verifies.
        length: the number of entries examined.
        head_seq / head_hash: the last verified link (``0`` / genesis when none).
        bad_seq: the seq at which verification first failed (the position expected there).
        reason: why it failed.
        detail: a sentence for people.
    """

    ok: bool
    length: int
    head_seq: int
    head_hash: str
    bad_seq: int | None = None
    reason: BreakReason | None = None
    detail: str | None = None


def link_break(
    *,
    saga_id: str,
    expected_seq: int,
    prev_hash: str,
    entry_saga_id: object,
    entry_seq: int,
    entry_prev_hash: object,
    entry_hash: object,
    recompute: Callable[[], str],
    stored_later: Callable[[int], bool],
) -> tuple[BreakReason, str] | None:
    """Why the next stored entry breaks a chain walked so far, or ``None``: the one rule every
    walker applies (docs/adr/0002-hash-chain.md, "What a verifier reports"; the standalone
    verifier keeps a copy, the compiled walker a port, and tests/conformance runs them all).

    Args:
        saga_id / expected_seq / prev_hash: the walk so far: its saga, the seq expected next,
            the last verified hash (the genesis hash or an anchor's before the first).
        entry_saga_id / entry_seq / entry_prev_hash / entry_hash: the entry's stored fields.
        recompute: the entry's hash computed from its content (``SerializationError``: it
            cannot be hashed, which is an edit).
        stored_later: whether a seq is stored after this entry (a swap, not a gap).
    """
    if entry_saga_id != saga_id:
        return BreakReason.FOREIGN_SAGA, f"entry belongs to saga {entry_saga_id!r}"
    if expected_seq == 1 and entry_seq == 1 and entry_prev_hash != GENESIS_HASH:
        shown = entry_prev_hash[:16] if isinstance(entry_prev_hash, str) else entry_prev_hash
        return (
            BreakReason.WRONG_GENESIS,
            f"seq 1 has previous hash {shown}…, not the genesis hash",
        )
    if entry_seq > expected_seq:
        if stored_later(expected_seq):
            return (
                BreakReason.REORDERED,
                f"seq {entry_seq} found where seq {expected_seq} was expected "
                f"(seq {expected_seq} is stored later)",
            )
        return BreakReason.GAP, f"seq {expected_seq} is missing (found {entry_seq})"
    if entry_seq < expected_seq:
        return (
            BreakReason.REORDERED,
            f"seq {entry_seq} found where seq {expected_seq} was expected",
        )
    try:
        recomputed = recompute()
    except SerializationError as exc:
        return BreakReason.EDITED, f"entry cannot be hashed: {exc}"
    if recomputed != entry_hash:
        return BreakReason.EDITED, "content does not match its recorded hash"
    if entry_prev_hash != prev_hash:
        return BreakReason.BROKEN_LINK, "previous hash is not the preceding entry's"
    return None


def verify(
    entries: Iterable[JournalEntry],
    *,
    saga_id: str | None = None,
    after_seq: int = 0,
    after_hash: str = GENESIS_HASH,
) -> ChainVerdict:
    """Check one saga's entries, given in the order stored, and report the first break.

    Args:
        entries: the saga's entries in stored order (not re-sorted: order is evidence).
        saga_id: the saga expected; defaults to the first entry's.
        after_seq / after_hash: a trusted link the entries continue from (for a chain whose
            beginning was removed by retention); by default the chain starts at seq 1.
    """
    stored = list(entries)
    expected_seq = after_seq + 1
    prev = after_hash
    count = 0

    def broken(reason: BreakReason, detail: str) -> ChainVerdict:
        return ChainVerdict(
            ok=False,
            length=count,
            head_seq=expected_seq - 1,
            head_hash=prev,
            bad_seq=expected_seq,
            reason=reason,
            detail=detail,
        )

    for position, entry in enumerate(stored):
        count += 1
        saga = saga_id if saga_id is not None else entry.saga_id
        saga_id = saga
        found = link_break(
            saga_id=saga,
            expected_seq=expected_seq,
            prev_hash=prev,
            entry_saga_id=entry.saga_id,
            entry_seq=entry.seq,
            entry_prev_hash=entry.prev_hash,
            entry_hash=entry.hash,
            recompute=lambda e=entry: compute_hash(e.prev_hash, e, seq=e.seq),  # type: ignore[misc]
            stored_later=lambda seq, p=position: any(  # type: ignore[misc]
                later.seq == seq for later in stored[p + 1 :]
            ),
        )
        if found is not None:
            return broken(*found)
        prev = entry.hash
        expected_seq += 1
    return ChainVerdict(ok=True, length=count, head_seq=expected_seq - 1, head_hash=prev)
