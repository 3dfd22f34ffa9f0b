"""The log of signing rounds, read from the archive: rounds, the log's state before a round, and
the proofs an auditor checks (inclusion of a head, consistency between two rounds).

Proofs are built from the log's *frontier* after the older round (stored with each round of the
log) and the leaves signed since, so a proof about recent rounds never reads the whole log.  The
frontier is not signed: a wrong one gives a proof that does not verify, never a false one
(docs/adr/0015-round-log.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sagacity.consumers.archive._checkpoints import (
    LOG_ROUND_FORMAT,
    ROUND_FORMAT,
    SignedRound,
    leaf_hash,
    leaves_in_order,
)
from sagacity.consumers.archive._merkle import (
    RootBuilder,
    consistency_ranges,
    decode_frontier,
    inclusion_ranges,
    range_roots,
)
from sagacity.errors import RoundLogError
from sagacity.ports import RoundLog, RoundRow

_FORMATS = {"SGCR1": ROUND_FORMAT, "SGCR2": LOG_ROUND_FORMAT}


def round_of_stored(row: RoundRow) -> SignedRound:
    """The round a stored row says was signed (its frontier is not signed: left out)."""
    return SignedRound(
        round_id=row.round_id,
        leaf_count=row.leaf_count,
        root=row.root,
        prev_root=row.prev_root,
        signed_at_us=row.signed_at_us,
        key_id=row.key_id,
        signature=row.signature,
        format=row.format,
        tree_size=row.tree_size,
    )


def round_of_row(row: Sequence[Any]) -> SignedRound:
    """A round from ``round_id, leaf_count, root, prev_root, signed_at_us, key_id, signature,
    format, tree_size`` (further columns are ignored)."""
    return SignedRound(
        round_id=int(row[0]),
        leaf_count=int(row[1]),
        root=row[2],
        prev_root=row[3],
        signed_at_us=int(row[4]),
        key_id=row[5],
        signature=row[6],
        format=int(row[7]),
        tree_size=None if row[8] is None else int(row[8]),
    )


def rounds_after(
    log: RoundLog, round_id: int = 0, *, limit: int | None = None
) -> list[SignedRound]:
    """The rounds after ``round_id``, oldest first (every round for 0)."""
    return [round_of_stored(r) for r in log.rounds_after(round_id, limit=limit)]


def round_by_id(log: RoundLog, round_id: int) -> SignedRound | None:
    """One round, or ``None`` when the archive does not hold it."""
    row = log.round(round_id)
    return None if row is None else round_of_stored(row)


def log_after(log: RoundLog, round_id: int | None) -> RootBuilder:
    """The log as round ``round_id`` left it (``None``: empty): from the round's stored
    frontier when it leads to the round's signed root, else from every leaf up to it."""
    if round_id is None:
        return RootBuilder()
    row = log.round(round_id)
    if (
        row is not None
        and row.format == LOG_ROUND_FORMAT
        and row.frontier is not None
        and row.tree_size is not None
    ):
        try:
            builder = RootBuilder.from_frontier(row.tree_size, decode_frontier(row.frontier))
        except (ValueError, TypeError):
            pass
        else:
            root = builder.root()
            if root is not None and root.hex() == row.root:
                return builder
    builder = RootBuilder()
    for leaf in leaves_in_order(log, up_to_round=round_id):
        builder.add(leaf)
    return builder


def previous_round_id(log: RoundLog, round_id: int) -> int | None:
    """The round before ``round_id`` (``None``: it is the first)."""
    return log.previous_round_id(round_id)


def _leaves_between(log: RoundLog, after: int, upto: int) -> Iterator[bytes]:
    """The leaves of rounds ``after`` < round <= ``upto`` in log order."""
    with log.log_leaves(after=after, upto=upto) as rows:
        for saga_id, seq, hash in rows:
            yield leaf_hash(saga_id=saga_id, seq=seq, hash=hash)


def inclusion_proof_in_log(log: RoundLog, signed: SignedRound, leaf_index: int) -> list[bytes]:
    """The audit path of leaf ``leaf_index`` of round ``signed`` (a round of the log) to the
    round's root, in RFC 9162 order; only that round's leaves are read.

    Raises:
        RoundLogError: the round is not of the log, or its leaves do not give a proof.
    """
    if signed.format != LOG_ROUND_FORMAT or signed.tree_size is None:
        raise RoundLogError(f"round {signed.round_id} is not a round of the log")
    first = signed.tree_size - signed.leaf_count
    with log.transaction("prove a checkpoint's inclusion"):
        before = log_after(log, log.previous_round_id(signed.round_id))
        if before.count != first:
            raise RoundLogError(
                f"round {signed.round_id} starts at leaf {first}; the archive holds "
                f"{before.count} leaves before it"
            )
        ranges = inclusion_ranges(first + leaf_index, signed.tree_size)
        try:
            roots = range_roots(
                ranges,
                _leaves_between(log, signed.round_id - 1, signed.round_id),
                base=first,
                frontier=before.frontier(),
            )
        except ValueError as exc:
            raise RoundLogError(f"no inclusion proof in round {signed.round_id}: {exc}") from exc
    return [roots[r] for r in ranges]


def consistency_proof_between(log: RoundLog, old: SignedRound, new: SignedRound) -> list[bytes]:
    """The RFC 9162 consistency proof from round ``old``'s log to round ``new``'s (both rounds
    of the log), built from ``old``'s frontier and the leaves signed after it.

    Raises:
        RoundLogError: a round is not of the log, or the archive's leaves do not give a proof.
    """
    if (
        old.format != LOG_ROUND_FORMAT
        or new.format != LOG_ROUND_FORMAT
        or old.tree_size is None
        or new.tree_size is None
    ):
        raise RoundLogError("consistency is proven between rounds of the log only")
    if not 0 < old.tree_size <= new.tree_size or old.round_id > new.round_id:
        raise RoundLogError(
            f"round {new.round_id} ({new.tree_size} leaves) cannot extend round "
            f"{old.round_id} ({old.tree_size} leaves)"
        )
    ranges = consistency_ranges(old.tree_size, new.tree_size)
    with log.transaction("prove the log's consistency"):
        before = log_after(log, old.round_id)
        if before.count != old.tree_size:
            raise RoundLogError(
                f"round {old.round_id} signed {old.tree_size} leaves; the archive holds "
                f"{before.count} up to it"
            )
        try:
            roots = range_roots(
                ranges,
                _leaves_between(log, old.round_id, new.round_id),
                base=old.tree_size,
                frontier=before.frontier(),
            )
        except ValueError as exc:
            raise RoundLogError(
                f"no consistency proof from round {old.round_id} to {new.round_id}: {exc}"
            ) from exc
    return [roots[r] for r in ranges]


def round_to_dict(signed: SignedRound) -> dict[str, Any]:
    """A round as JSON fields (the form bundles, witnesses and auditors' records share)."""
    out: dict[str, Any] = {
        "round_id": signed.round_id,
        "format": "SGCR2" if signed.format == LOG_ROUND_FORMAT else "SGCR1",
        "leaf_count": signed.leaf_count,
        "root": signed.root,
        "prev_root": signed.prev_root,
        "signed_at_us": signed.signed_at_us,
        "key_id": signed.key_id,
        "signature": signed.signature,
    }
    if signed.format == LOG_ROUND_FORMAT:
        out["tree_size"] = signed.tree_size
    return out


def round_from_dict(data: Any) -> SignedRound:
    """The round :func:`round_to_dict` wrote.

    Raises:
        ValueError: not such a round.
    """
    if not isinstance(data, dict):
        raise ValueError("a round is a JSON object")
    try:
        fmt = _FORMATS[data.get("format", "SGCR1")]
        tree_size = data.get("tree_size")
        signed = SignedRound(
            round_id=_int(data["round_id"]),
            leaf_count=_int(data["leaf_count"]),
            root=_hex(data["root"]),
            prev_root=_hex(data["prev_root"]),
            signed_at_us=_int(data["signed_at_us"]),
            key_id=str(data["key_id"]),
            signature=str(data["signature"]),
            format=fmt,
            tree_size=None if tree_size is None else _int(tree_size),
        )
    except KeyError as exc:
        raise ValueError(f"a round needs {exc.args[0]!r}") from exc
    if fmt == LOG_ROUND_FORMAT and signed.tree_size is None:
        raise ValueError("a round of the log needs its tree_size")
    return signed


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _hex(value: Any) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise ValueError(f"expected 64 hex characters, got {value!r}")
    bytes.fromhex(value)
    return value.lower()
