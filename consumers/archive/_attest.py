"""A saga's last signed head, verified under the archive's own key: where a restarted archiver
may resume attesting a saga it has not read from the topic since it started.

The checkpoint rows, rounds and frontiers are read from the database, so each is *verified*,
never trusted: a round's signature with a pinned key, and its root rebuilt from the log before
it and the round's own leaves (a wrong frontier or leaf gives another root, never a false
one).  A head a verified round covers was read from the topic by an earlier process of this
archive (docs/adr/0012-checkpoint-rounds.md, "The signer's input").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from sagacity.consumers.archive._checkpoints import (
    LOG_ROUND_FORMAT,
    Checkpoint,
    key_id_of,
    leaf_hash,
    merkle_root,
    signature_valid,
)
from sagacity.consumers.archive._roundlog import log_after, round_by_id
from sagacity.ports import RoundLog

Head = tuple[int, str]


class CheckpointVerifier:
    """Finds each saga's latest head signed under a trusted key, checking what it reads.

    Args:
        keys: raw Ed25519 public keys this archive signs (or signed) with.
        rounds_cached: verified rounds kept (their leaves), least recently used forgotten.
    """

    def __init__(self, keys: Sequence[bytes], *, rounds_cached: int = 16) -> None:
        self._keys = {key_id_of(k): k for k in keys}
        self._rounds: OrderedDict[int, list[bytes] | None] = OrderedDict()
        self._cached = rounds_cached

    def __bool__(self) -> bool:
        return bool(self._keys)

    def signed_heads(self, log: RoundLog, saga_ids: Sequence[str]) -> dict[str, Head]:
        """Per saga of ``saga_ids``, its highest checkpoint that verifies (absent: none)."""
        if not saga_ids or not self._keys:
            return {}
        found: dict[str, Head] = {}
        for row in log.checkpoints_of(saga_ids, list(self._keys)):
            if row.saga_id in found:
                continue
            checkpoint = Checkpoint(
                saga_id=row.saga_id,
                seq=row.seq,
                hash=row.hash,
                signed_at_us=row.signed_at_us,
                key_id=row.key_id,
                signature=row.signature,
                round_id=row.round_id,
                leaf_index=row.leaf_index,
            )
            if self._verified(log, checkpoint):
                found[row.saga_id] = (checkpoint.seq, checkpoint.hash)
        return found

    def _verified(self, log: RoundLog, cp: Checkpoint) -> bool:
        if cp.round_id is None:
            key = self._keys.get(cp.key_id)
            return key is not None and signature_valid(key, cp)
        if cp.leaf_index is None:
            return False
        leaves = self._round(log, cp.round_id)
        return (
            leaves is not None
            and 0 <= cp.leaf_index < len(leaves)
            and leaves[cp.leaf_index] == leaf_hash(saga_id=cp.saga_id, seq=cp.seq, hash=cp.hash)
        )

    def _round(self, log: RoundLog, round_id: int) -> list[bytes] | None:
        if round_id in self._rounds:
            self._rounds.move_to_end(round_id)
            return self._rounds[round_id]
        leaves = self._verify_round(log, round_id)
        self._rounds[round_id] = leaves
        while len(self._rounds) > self._cached:
            self._rounds.popitem(last=False)
        return leaves

    def _verify_round(self, log: RoundLog, round_id: int) -> list[bytes] | None:
        """The round's leaves in order when its signature and root verify, else ``None``."""
        signed = round_by_id(log, round_id)
        if signed is None:
            return None
        key = self._keys.get(signed.key_id)
        if key is None or not signature_valid(key, signed):
            return None
        rows = log.round_leaves(round_id)
        if [r[0] for r in rows] != list(range(signed.leaf_count)):
            return None
        leaves = [leaf_hash(saga_id=s, seq=n, hash=h) for _i, s, n, h in rows]
        if signed.format == LOG_ROUND_FORMAT:
            if signed.first_leaf is None:
                return None
            builder = log_after(log, log.previous_round_id(round_id))
            if builder.count != signed.first_leaf:
                return None
            for leaf in leaves:
                builder.add(leaf)
            root = builder.root()
        else:
            root = merkle_root(leaves) if leaves else None
        if root is None or root.hex() != signed.root:
            return None
        return leaves
