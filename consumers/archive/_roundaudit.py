"""Auditing the signing rounds: each round's checkpoints, in leaf order, must hash to the root
its one signature covers, and each round must follow the one before it
(docs/adr/0012-checkpoint-rounds.md, docs/adr/0015-round-log.md).

:func:`audit_rounds` runs first in the audit's snapshot; it remembers only the rounds that
fail, and every checkpoint of a failed round then fails its saga with that finding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sagacity._native import native
from sagacity.consumers.archive._checkpoints import (
    FIRST_PREV_ROOT,
    LOG_ROUND_FORMAT,
    SignedRound,
    leaf_hash,
    leaves_in_order,
    signature_valid,
)
from sagacity.consumers.archive._merkle import RootBuilder, decode_frontier
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._roundlog import round_of_row
from sagacity.ports import RoundLog, RoundStreams


def _python_leaf(saga_id: Any, seq: Any, hash: Any) -> bytes | None:
    return None  # the compiled module is not there: leaf_hash below


_native_leaf: Callable[[Any, Any, Any], bytes | None] | None = native("leaf_hash")
native_leaf: Callable[[Any, Any, Any], bytes | None] = _native_leaf or _python_leaf
"""A leaf's hash from the compiled module (``sagacity_native.leaf_hash``, byte for byte
:func:`leaf_hash`'s), or ``None`` for anything :func:`leaf_hash` must judge (it raises, and
the finding quotes its message) or when the module is not there."""


@dataclass(kw_only=True)
class RoundAudit:
    """The signing rounds an audit checked, and the findings of those that failed (by round
    id: every checkpoint of a failed round fails with that finding)."""

    rounds: int = 0
    failed: dict[int, tuple[AuditReason, str]] = field(default_factory=dict)
    latest: tuple[int, str] | None = None
    """The last round the archive holds (id, root): publish it, and pass it back as a known
    round next time (:func:`iter_audits` ``known_rounds``) to catch rounds removed at the end."""
    last: SignedRound | None = None
    """That last round in full (a witness publishes it)."""


def _judge_round(
    round_id: int,
    signed: SignedRound | None,
    *,
    leaves: int,
    root: bytes | None,
    log_size: int | None,
    problem: str | None,
    keys: Mapping[str, bytes],
    previous: tuple[int, str] | None,
) -> tuple[AuditReason, str] | None:
    """The finding on one round (``None``: verified), from its row, its leaves and the round
    before it in the archive: ``previous`` (id, root), ``None`` for the first.  ``root`` is the
    root rebuilt from the archive: over the round's own leaves for the first format, over the
    log up to it (``log_size`` leaves) for a round of the log."""
    if signed is None:
        return AuditReason.BAD_SIGNATURE, (
            f"checkpoints name signing round {round_id}, which the archive does not hold"
        )
    public = keys.get(signed.key_id)
    if public is None:
        return AuditReason.UNKNOWN_KEY, (
            f"round {round_id} is signed by untrusted key {signed.key_id}"
        )
    if not signature_valid(public, signed):
        return AuditReason.BAD_SIGNATURE, f"the signature of round {round_id} does not verify"
    if problem is not None:
        return AuditReason.BAD_SIGNATURE, f"round {round_id}: {problem}"
    if signed.prev_root != (previous[1] if previous else FIRST_PREV_ROOT):
        return AuditReason.BAD_SIGNATURE, (
            f"round {round_id} does not follow round {previous[0]} (its previous root differs):"
            " a signing round between them was removed or replaced"
            if previous
            else f"round {round_id} is the first the archive holds, but it follows another"
            " round: earlier signing rounds were removed"
        )
    if leaves != signed.leaf_count:
        return AuditReason.BAD_SIGNATURE, (
            f"round {round_id} signed {signed.leaf_count} heads; the archive holds {leaves} "
            "of its checkpoints (rows were removed or added)"
        )
    if signed.format == LOG_ROUND_FORMAT:
        if log_size != signed.tree_size:
            return AuditReason.BAD_SIGNATURE, (
                f"round {round_id} signed a log of {signed.tree_size} heads; the archive holds "
                f"{log_size} up to it (checkpoints of earlier rounds were removed or added)"
            )
        if root is None or root.hex() != signed.root:
            return AuditReason.BAD_SIGNATURE, (
                f"round {round_id}: the checkpoints signed up to it do not hash to the signed "
                "root (a checkpoint of this round or of an earlier one was changed)"
            )
        return None
    if root is None or root.hex() != signed.root:
        return AuditReason.BAD_SIGNATURE, (
            f"round {round_id}: its checkpoints do not hash to the signed root (a checkpoint "
            "of the round was edited)"
        )
    return None


def _log_before(log: RoundLog, previous: Sequence[Any] | None) -> RootBuilder:
    """The log as it stood before a round, from the round before it (``round_id, format,
    tree_size, frontier``; ``None``: no round before): its frontier when that is well formed,
    else every leaf up to it, read once (the frontier is not signed; a wrong one only makes the
    round fail, so a failure is re-checked from the leaves)."""
    if previous is None:
        return RootBuilder()
    # An archive older than the log gives format 1 and no frontier (the store's columns).
    if previous[1] == LOG_ROUND_FORMAT and previous[3] is not None:
        with contextlib.suppress(ValueError, TypeError):
            return RootBuilder.from_frontier(int(previous[2]), decode_frontier(previous[3]))
    return _log_from_leaves(log, int(previous[0]))


def _log_from_leaves(log: RoundLog, up_to_round: int) -> RootBuilder:
    builder = RootBuilder()
    for leaf in leaves_in_order(log, up_to_round=up_to_round):
        builder.add(leaf)
    return builder


def _leaf_problem(
    leaf: Sequence[Any], expected: int, last_saga: str | None, signed: SignedRound | None
) -> str | None:
    """What is wrong with a round's leaf row ``(round_id, leaf_index, saga_id, seq, hash,
    signed_at_us, key_id)`` expected at index ``expected``, if anything."""
    index = int(leaf[1])
    if index != expected:
        after = f" (after saga {last_saga!r})" if last_saga is not None else ""
        return (
            f"leaf {expected} is missing{after}"
            if index > expected
            else f"leaf {index} appears twice"
        )
    if signed is not None and (leaf[5] != signed.signed_at_us or leaf[6] != signed.key_id):
        return (
            f"leaf {index} shows a signing time or key other than its round's"
            " (those fields are covered by the round's signature only)"
        )
    return None


@dataclass(kw_only=True)
class _RoundLeaves:
    """One round's leaves as read: how many, the first problem with them, and (to judge a
    round of the log again from them) their hashes."""

    count: int = 0
    problem: str | None = None
    kept: list[bytes] | None = None


class _Leaves:
    """The leaves of every round, in round and leaf order, read one round at a time."""

    def __init__(self, rows: Iterator[Sequence[Any]]) -> None:
        self._rows = rows
        self.current: Sequence[Any] | None = next(rows, None)

    def of_round(
        self,
        round_id: int,
        signed: SignedRound | None,
        *,
        builders: Sequence[RootBuilder],
        keep: bool,
    ) -> _RoundLeaves:
        """Read round ``round_id``'s leaves, each hash added to every one of ``builders``."""
        read = _RoundLeaves(kept=[] if keep else None)
        last_saga = None
        at_us, key = (signed.signed_at_us, signed.key_id) if signed else (None, None)
        adds = [b.add for b in builders]
        leaf = self.current
        while leaf is not None and int(leaf[0]) == round_id:
            index = int(leaf[1])
            if read.problem is None and (index != read.count or leaf[5] != at_us or leaf[6] != key):
                read.problem = _leaf_problem(leaf, read.count, last_saga, signed)
            try:
                seq = int(leaf[3])
                hashed = native_leaf(leaf[2], seq, leaf[4]) or leaf_hash(
                    saga_id=leaf[2], seq=seq, hash=leaf[4]
                )
            except (TypeError, ValueError, UnicodeError) as exc:
                read.problem = read.problem or f"leaf {index} cannot be hashed: {exc}"
                hashed = bytes(32)
            for add in adds:
                add(hashed)
            if read.kept is not None:
                read.kept.append(hashed)
            last_saga = leaf[2]
            read.count += 1
            leaf = next(self._rows, None)
        self.current = leaf
        return read


def audit_rounds(
    rounds: RoundStreams,
    log: RoundLog,
    *,
    saga_id: str | None,
    keys: Mapping[str, bytes],
    fetch: int,
    known: Mapping[int, str],
    version: int,
) -> RoundAudit:
    """Check every signing round (or, for one saga, the rounds its checkpoints belong to)
    inside the caller's snapshot; leaves are streamed in order, so memory stays flat.  Each
    round's link to the round before it is checked either way; the ``known`` rounds (id: root,
    recorded earlier) only when all rounds are (``saga_id`` None).

    Every leaf goes into one log builder (a stack of perfect subtree roots: O(log n)), whose
    root at each round of the log (``SGCR2``) must be the signed one: a round rewritten and
    re-signed breaks every round after it.  For one saga, each round of the log is rebuilt
    from the log's frontier before it (docs/adr/0015-round-log.md)."""
    audit = RoundAudit()
    unseen = {round_id: root.lower() for round_id, root in known.items()}
    with rounds.round_streams(saga_id=saga_id, fetch=fetch, version=version) as (
        round_rows,
        leaf_rows,
    ):
        passed = _RoundPass(log, saga_id=saga_id, keys=keys, unseen=unseen)
        passed.run(round_rows, _Leaves(leaf_rows), audit)
        audit.latest = passed.previous
    if saga_id is None:
        for round_id, root in sorted(unseen.items()):
            audit.failed[round_id] = (
                AuditReason.TRUNCATED,
                (
                    f"round {round_id} (root {root[:16]}…), recorded earlier, is not in the"
                    " archive: signing rounds were removed"
                ),
            )
    return audit


class _RoundPass:
    """The walk of :func:`audit_rounds` over the rounds and their leaves, merged by round id;
    ``unseen`` loses each known round it meets."""

    def __init__(
        self,
        log: RoundLog,
        *,
        saga_id: str | None,
        keys: Mapping[str, bytes],
        unseen: dict[int, str],
    ) -> None:
        self._rounds_log = log
        self._saga_id = saga_id
        self._keys = keys
        self._unseen = unseen
        self.previous: tuple[int, str] | None = None
        """The last round walked (id, root)."""
        self._log = RootBuilder()  # every leaf so far (the whole archive), in log order

    def run(self, rounds: Iterator[Sequence[Any]], leaves: _Leaves, audit: RoundAudit) -> None:
        """Walk every round into ``audit``."""
        row = next(rounds, None)
        while row is not None or leaves.current is not None:
            round_id = min(int(r[0]) for r in (row, leaves.current) if r is not None)
            signed = None
            before: Sequence[Any] | None = None
            if row is not None and int(row[0]) == round_id:
                signed = round_of_row(row)
                if self._saga_id is not None:
                    self.previous = None if row[9] is None else (int(row[9]), row[10])
                    before = None if row[9] is None else (row[9], row[11], row[12], row[13])
                row = next(rounds, None)
            finding = self._round(round_id, signed, before, leaves)
            audit.rounds += 1
            if signed is not None:
                recorded = self._unseen.pop(round_id, None)
                if finding is None and recorded is not None and recorded != signed.root:
                    finding = (
                        AuditReason.BAD_SIGNATURE,
                        (
                            f"round {round_id} was recorded with root {recorded[:16]}…; the archive"
                            f" holds root {signed.root[:16]}…: the round was replaced"
                        ),
                    )
                self.previous = (round_id, signed.root)
                audit.last = signed
            if finding is not None:
                audit.failed[round_id] = finding

    def _round(
        self,
        round_id: int,
        signed: SignedRound | None,
        before: Sequence[Any] | None,
        leaves: _Leaves,
    ) -> tuple[AuditReason, str] | None:
        """One round's finding, from its leaves (read here) and the round before it."""
        in_log = signed is not None and signed.format == LOG_ROUND_FORMAT
        if self._saga_id is not None and in_log:
            self._log = _log_before(self._rounds_log, before)
        own = None if in_log else RootBuilder()  # a first-format round's own root
        builders = [self._log] if own is None else [self._log, own]
        read = leaves.of_round(
            round_id, signed, builders=builders, keep=self._saga_id is not None and in_log
        )
        finding = self._judged(round_id, signed, read, root_of=self._log if own is None else own)
        if finding is not None and read.kept is not None and before is not None:
            # The stored frontier is not evidence: judge again from the leaves themselves.
            self._log = _log_from_leaves(self._rounds_log, int(before[0]))
            for hashed in read.kept:
                self._log.add(hashed)
            finding = self._judged(round_id, signed, read, root_of=self._log)
        return finding

    def _judged(
        self, round_id: int, signed: SignedRound | None, read: _RoundLeaves, *, root_of: RootBuilder
    ) -> tuple[AuditReason, str] | None:
        return _judge_round(
            round_id,
            signed,
            leaves=read.count,
            root=root_of.root(),
            log_size=self._log.count,
            problem=read.problem,
            keys=self._keys,
            previous=self.previous,
        )
