"""Merkle trees as RFC 6962 / RFC 9162 define them: roots, inclusion and consistency proofs.

Leaves are 32-byte hashes (the caller hashes its data with a ``0x00`` prefix: a leaf, node or
root of another size is refused); an interior node is ``SHA-256(0x01 || left || right)``; a
tree of ``n`` leaves splits at the largest power of two below ``n``.  Everything here is pure:
the database-facing parts live in ``_roundlog``.

Proofs are built from *ranges*: every node of an inclusion or consistency proof is the root of
a contiguous range of leaves.  A streaming pass over the leaves in order then computes them in
O(log n) memory per range, and a *frontier* (the roots of the perfect subtrees that tile the
first ``base`` leaves, largest first) stands in for those ``base`` leaves, so a proof about the
newest leaves never needs the older ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

Range = tuple[int, int]
"""Leaves ``[start, end)``."""

NODE_BYTES = 32
"""Every leaf, node and root is a SHA-256 digest: a proof check refuses any other size (an
empty leaf and an empty root would otherwise be a one-leaf tree)."""


def _nodes(*hashes: bytes) -> bool:
    """Every one of ``hashes`` is a :data:`NODE_BYTES`-byte digest."""
    return all(isinstance(h, bytes) and len(h) == NODE_BYTES for h in hashes)


def _leaf(leaf: bytes) -> bytes:
    if not _nodes(leaf):
        raise ValueError(f"a Merkle leaf is {NODE_BYTES} bytes (a SHA-256 digest)")
    return leaf


def node(left: bytes, right: bytes) -> bytes:
    """An interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n`` at least 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree, leaves first; a level's odd last node moves up unpaired (which
    is RFC 6962's split at the largest power of two below the size)."""
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    levels = [[_leaf(leaf) for leaf in leaves]]
    while len(levels[-1]) > 1:
        level = levels[-1]
        up = [node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            up.append(level[-1])
        levels.append(up)
    return levels


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The root over ``leaves`` in order."""
    return _levels(leaves)[-1][0]


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` (RFC 6962 section 2.1.1), bottom up."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    path = []
    for level in _levels(leaves)[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index >>= 1
    return path


def root_from_proof(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes | None:
    """The root that ``path`` proves ``leaf`` at ``index`` of ``size`` leaves under, or
    ``None`` when the path does not fit the position (RFC 9162 section 2.1.3.2) or the leaf or
    a node of it is not 32 bytes."""
    if not 0 <= index < size or not _nodes(leaf, *path):
        return None
    fn, sn, current = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            current = node(sibling, current)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            current = node(current, sibling)
        fn >>= 1
        sn >>= 1
    return current if sn == 0 else None


def verify_inclusion(
    leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes
) -> bool:
    """Whether ``path`` proves ``leaf`` at ``index`` of ``size`` leaves under ``root`` (every
    one of them 32 bytes)."""
    return _nodes(root) and root_from_proof(leaf, index, size, path) == root


class RootBuilder:
    """The root of leaves given one at a time, in O(log n) memory: a stack of the roots of the
    perfect subtrees seen so far (the *frontier*), largest first."""

    __slots__ = ("_stack", "count")

    def __init__(self) -> None:
        self._stack: list[tuple[bytes, int]] = []
        self.count = 0

    @classmethod
    def from_frontier(cls, size: int, nodes: Sequence[bytes]) -> RootBuilder:
        """A builder that has seen ``size`` leaves whose frontier is ``nodes``.

        Raises:
            ValueError: ``nodes`` is not one 32-byte node per perfect subtree of ``size``.
        """
        sizes = frontier_sizes(size)
        if len(sizes) != len(nodes) or any(len(n) != 32 for n in nodes):
            raise ValueError(f"a frontier of {size} leaves has {len(sizes)} nodes of 32 bytes")
        builder = cls()
        builder._stack = list(zip(nodes, sizes, strict=True))
        builder.count = size
        return builder

    def add(self, leaf: bytes) -> None:
        """Append the next leaf."""
        stack = self._stack
        current, size = _leaf(leaf), 1
        while stack and stack[-1][1] == size:
            left, _ = stack.pop()
            current, size = node(left, current), size * 2
        stack.append((current, size))
        self.count += 1

    def root(self) -> bytes | None:
        """The root so far (``None`` before the first leaf)."""
        if not self._stack:
            return None
        current = self._stack[-1][0]
        for left, _ in reversed(self._stack[:-1]):
            current = node(left, current)
        return current

    def frontier(self) -> list[bytes]:
        """The roots of the perfect subtrees tiling the leaves so far, largest first."""
        return [n for n, _ in self._stack]


def frontier_sizes(size: int) -> list[int]:
    """The sizes of the perfect subtrees tiling ``size`` leaves, largest first."""
    if size < 0:
        raise ValueError("a tree size is not negative")
    return [1 << bit for bit in range(size.bit_length() - 1, -1, -1) if size >> bit & 1]


def frontier_ranges(size: int) -> list[Range]:
    """The ranges of the perfect subtrees tiling ``size`` leaves, largest first."""
    out, start = [], 0
    for width in frontier_sizes(size):
        out.append((start, start + width))
        start += width
    return out


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The leaf ranges whose roots make leaf ``index``'s audit path in a tree of ``size``
    leaves, in proof order (RFC 9162 section 2.1.3.1: bottom up)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    out: list[Range] = []
    start, n, m = 0, size, index
    while n > 1:
        k = _split(n)
        if m < k:
            out.append((start + k, start + n))
            n = k
        else:
            out.append((start, start + k))
            start, n, m = start + k, n - k, m - k
    out.reverse()
    return out


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """The leaf ranges whose roots make the consistency proof from a tree of ``old_size``
    leaves to one of ``new_size``, in proof order (RFC 9162 section 2.1.4.1).

    Every range either ends at or before ``old_size`` (a perfect subtree of the old tree: one
    of its frontier's) or starts at or after it.
    """
    if not 0 < old_size <= new_size:
        raise ValueError(f"no consistency proof from {old_size} leaves to {new_size}")
    out: list[Range] = []
    start, n, m, whole = 0, new_size, old_size, True
    while m != n:
        k = _split(n)
        if m <= k:
            out.append((start + k, start + n))
            n = k
        else:
            out.append((start, start + k))
            start, n, m, whole = start + k, n - k, m - k, False
    if not whole:
        out.append((start, start + n))
    out.reverse()
    return out


def range_roots(
    ranges: Iterable[Range],
    leaves: Iterable[bytes],
    *,
    base: int = 0,
    frontier: Sequence[bytes] = (),
) -> dict[Range, bytes]:
    """The root of each range, from the leaves from index ``base`` on, in order.

    The first ``base`` leaves are given by their ``frontier`` instead: a range ending at or
    before ``base`` must be one of its perfect subtrees, and one that starts before ``base``
    and ends after it must be a perfect subtree too (it is then seeded from the frontier).
    ``leaves`` is read only as far as the last range needs.

    Raises:
        ValueError: a range the frontier cannot give, or too few leaves.
    """
    spans = frontier_ranges(base)
    if len(spans) != len(frontier):
        raise ValueError(f"a frontier of {base} leaves has {len(spans)} nodes")
    known = dict(zip(spans, frontier, strict=True))
    out: dict[Range, bytes] = {}
    pending: list[tuple[int, Range, RootBuilder]] = []
    for start, end in set(ranges):
        if not 0 <= start < end:
            raise ValueError(f"leaves {start}..{end} are not a range")
        if end <= base:
            if (start, end) not in known:
                raise ValueError(f"leaves {start}..{end} are not a subtree of the first {base}")
            out[(start, end)] = known[(start, end)]
        elif start < base:
            inside = [(s, e) for s, e in spans if s >= start]
            width = end - start
            if not inside or inside[0][0] != start or width & (width - 1) or start % width:
                raise ValueError(f"leaves {start}..{end} cannot be seeded from the frontier")
            builder = RootBuilder.from_frontier(base - start, [known[s] for s in inside])
            pending.append((base, (start, end), builder))
        else:
            pending.append((start, (start, end), RootBuilder()))
    if not pending:
        return out
    pending.sort(key=lambda p: p[0])
    last = max(r[1] for _, r, _ in pending)
    active: list[tuple[Range, RootBuilder]] = []
    nxt, index = 0, base
    for leaf in leaves:
        while nxt < len(pending) and pending[nxt][0] == index:
            active.append(pending[nxt][1:])
            nxt += 1
        index += 1
        finished = False
        for span, builder in active:
            builder.add(leaf)
            finished = finished or span[1] == index
        if finished:
            for span, builder in active:
                if span[1] == index:
                    out[span] = builder.root()  # type: ignore[assignment]
            active = [a for a in active if a[0][1] != index]
        if index >= last:
            return out
    raise ValueError(f"the proof needs {last} leaves; only {index} were given")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether ``proof`` shows the tree of ``new_size`` leaves with ``new_root`` extends the
    one of ``old_size`` leaves with ``old_root`` (RFC 9162 section 2.1.4.2); never when a
    root or a node of it is not 32 bytes."""
    if not 0 < old_size <= new_size or not _nodes(old_root, new_root, *proof):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if not path:
        return False
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """The consistency proof from the first ``old_size`` of ``leaves`` to all of them (in
    memory; the archive streams instead)."""
    ranges = consistency_ranges(old_size, len(leaves))
    roots = range_roots(ranges, leaves)
    return [roots[r] for r in ranges]


def encode_frontier(nodes: Sequence[bytes]) -> str:
    """A frontier as text: its nodes' hex, concatenated."""
    return "".join(n.hex() for n in nodes)


def decode_frontier(text: str) -> list[bytes]:
    """The nodes of :func:`encode_frontier`'s text.

    Raises:
        ValueError: not a whole number of 32-byte hex nodes.
    """
    raw = bytes.fromhex(text)
    if len(raw) % 32:
        raise ValueError("a frontier is a sequence of 32-byte nodes")
    return [raw[i : i + 32] for i in range(0, len(raw), 32)]
