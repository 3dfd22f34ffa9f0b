"""Signed checkpoints: Ed25519 signatures over archived chain heads.

A checkpoint states "saga S had reached seq N with hash H", signed with a key kept outside the
database.  Since docs/adr/0012-checkpoint-rounds.md a signing round signs many heads at once:
each head is a leaf of a Merkle tree (RFC 6962 shape) and one signature covers the round::

    leaf  = SHA-256(0x00 || "SGCL1" || F(saga_id) || F(int64_be(seq)) || F(hash))
    node  = SHA-256(0x01 || left || right)
    round = "SGCR1" || F(int64_be(round_id)) || F(int64_be(leaf_count)) || F(root)
                    || F(prev_root) || F(int64_be(signed_at_us)) || F(key_id)

``prev_root`` is the root of the round signed before (64 zeros for the first): the rounds form
a chain, so a round removed whole breaks the link of the next one.

Archives signed before that hold one signature per head (docs/adr/0006)::

    "SGCP1" || F(saga_id) || F(int64_be(seq)) || F(hash) || F(int64_be(signed_at_us)) || F(key_id)

with ``F`` the length-prefixed field of docs/adr/0002-hash-chain.md (text as UTF-8; ``hash``,
``root`` and ``key_id`` as their lowercase hex text).  ``key_id`` is the first 16 hex characters
of the SHA-256 of the raw 32-byte public key.  Both forms are reimplemented by the standalone
bundle verifier.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sagacity.consumers.archive._findings import Finding, FindingReason, describe, log_findings
from sagacity.consumers.archive._ledger import IngestLedger, LedgerEntry
from sagacity.consumers.archive._merkle import RootBuilder as RootBuilder
from sagacity.consumers.archive._merkle import decode_frontier, encode_frontier
from sagacity.consumers.archive._merkle import inclusion_proof as inclusion_proof
from sagacity.consumers.archive._merkle import merkle_root as merkle_root
from sagacity.consumers.archive._merkle import root_from_proof as root_from_proof
from sagacity.entries._events import now_micros
from sagacity.errors import RoundLogError
from sagacity.ports import CheckpointSigning, RoundLog, SigningUnit
from sagacity.signing._ed25519 import KeyHolder, write_private_key
from sagacity.signing._ed25519 import key_id_of as key_id_of
from sagacity.signing._ed25519 import parse_public_key as _parse_public_key
from sagacity.signing._ed25519 import signature_valid as _signature_valid

CHECKPOINT_MAGIC = b"SGCP1"
LEAF_MAGIC = b"SGCL1"
ROUND_MAGIC = b"SGCR1"
LOG_ROUND_MAGIC = b"SGCR2"
FIRST_PREV_ROOT = "0" * 64
"""The previous root of an archive's first signing round."""
SIGNING_KEY_ENV = "SAGACITY_ARCHIVE_SIGNING_KEY"
"""Environment variable naming the signing key file."""


def _field(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def checkpoint_message(
    *, saga_id: str, seq: int, hash: str, signed_at_us: int, key_id: str
) -> bytes:
    """The exact bytes a checkpoint signature covers."""
    return b"".join(
        (
            CHECKPOINT_MAGIC,
            _field(saga_id.encode("utf-8")),
            _field(struct.pack(">q", seq)),
            _field(hash.encode("ascii")),
            _field(struct.pack(">q", signed_at_us)),
            _field(key_id.encode("ascii")),
        )
    )


def leaf_hash(*, saga_id: str, seq: int, hash: str) -> bytes:
    """The Merkle leaf of one signed head (32 bytes)."""
    return hashlib.sha256(
        b"".join(
            (
                b"\x00",
                LEAF_MAGIC,
                _field(saga_id.encode("utf-8")),
                _field(struct.pack(">q", seq)),
                _field(hash.encode("ascii")),
            )
        )
    ).digest()


def round_message(
    *,
    round_id: int,
    leaf_count: int,
    root: str,
    prev_root: str,
    signed_at_us: int,
    key_id: str,
) -> bytes:
    """The exact bytes a signing round's signature covers."""
    return b"".join(
        (
            ROUND_MAGIC,
            _field(struct.pack(">q", round_id)),
            _field(struct.pack(">q", leaf_count)),
            _field(root.encode("ascii")),
            _field(prev_root.encode("ascii")),
            _field(struct.pack(">q", signed_at_us)),
            _field(key_id.encode("ascii")),
        )
    )


def log_round_message(
    *,
    round_id: int,
    tree_size: int,
    leaf_count: int,
    root: str,
    prev_root: str,
    signed_at_us: int,
    key_id: str,
) -> bytes:
    """The exact bytes a round of the log (``SGCR2``) is signed over: ``root`` is the tree over
    every leaf signed so far, ``tree_size`` of them, the last ``leaf_count`` this round's."""
    return b"".join(
        (
            LOG_ROUND_MAGIC,
            _field(struct.pack(">q", round_id)),
            _field(struct.pack(">q", tree_size)),
            _field(struct.pack(">q", leaf_count)),
            _field(root.encode("ascii")),
            _field(prev_root.encode("ascii")),
            _field(struct.pack(">q", signed_at_us)),
            _field(key_id.encode("ascii")),
        )
    )


ROUND_FORMAT = 1
"""``SGCR1``: a round's root covers its own heads only (docs/adr/0012)."""
LOG_ROUND_FORMAT = 2
"""``SGCR2``: a round's root covers every head signed so far (docs/adr/0015-round-log.md)."""


@dataclass(frozen=True, kw_only=True)
class SignedRound:
    """One signing round: a root signed once.  In the log format (``format`` 2) the root is
    over every leaf signed so far (``tree_size`` of them, this round's ``leaf_count`` last);
    in the first format it is over this round's leaves only."""

    round_id: int
    leaf_count: int
    root: str
    prev_root: str
    signed_at_us: int
    key_id: str
    signature: str
    format: int = ROUND_FORMAT
    tree_size: int | None = None

    @property
    def first_leaf(self) -> int | None:
        """The log index of this round's first leaf (log rounds only)."""
        return None if self.tree_size is None else self.tree_size - self.leaf_count

    def message(self) -> bytes:
        """The signed bytes."""
        if self.format == LOG_ROUND_FORMAT:
            return log_round_message(
                round_id=self.round_id,
                tree_size=-1 if self.tree_size is None else self.tree_size,
                leaf_count=self.leaf_count,
                root=self.root,
                prev_root=self.prev_root,
                signed_at_us=self.signed_at_us,
                key_id=self.key_id,
            )
        return round_message(
            round_id=self.round_id,
            leaf_count=self.leaf_count,
            root=self.root,
            prev_root=self.prev_root,
            signed_at_us=self.signed_at_us,
            key_id=self.key_id,
        )


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One signed head: a leaf of round ``round_id``, or (archives signed before rounds) a head
    with a ``signature`` of its own."""

    saga_id: str
    seq: int
    hash: str
    signed_at_us: int
    key_id: str
    signature: str | None = None
    round_id: int | None = None
    leaf_index: int | None = None

    def message(self) -> bytes:
        """The signed bytes."""
        return checkpoint_message(
            saga_id=self.saga_id,
            seq=self.seq,
            hash=self.hash,
            signed_at_us=self.signed_at_us,
            key_id=self.key_id,
        )


class Signer(KeyHolder):
    """Signs checkpoints with an Ed25519 private key (``Signer.from_file``: a PEM file, as
    :func:`generate_key` writes it)."""

    def sign_round(
        self,
        *,
        round_id: int,
        leaf_count: int,
        root: str,
        prev_root: str = FIRST_PREV_ROOT,
        signed_at_us: int,
    ) -> SignedRound:
        """Sign a round's root, linked to the previous round's."""
        unsigned = SignedRound(
            round_id=round_id,
            leaf_count=leaf_count,
            root=root,
            prev_root=prev_root,
            signed_at_us=signed_at_us,
            key_id=self.key_id,
            signature="",
        )
        return self._signed(unsigned)

    def sign_log_round(
        self,
        *,
        round_id: int,
        tree_size: int,
        leaf_count: int,
        root: str,
        prev_root: str = FIRST_PREV_ROOT,
        signed_at_us: int,
    ) -> SignedRound:
        """Sign a round of the log (``SGCR2``): the root over all ``tree_size`` leaves so far."""
        unsigned = SignedRound(
            round_id=round_id,
            leaf_count=leaf_count,
            root=root,
            prev_root=prev_root,
            signed_at_us=signed_at_us,
            key_id=self.key_id,
            signature="",
            format=LOG_ROUND_FORMAT,
            tree_size=tree_size,
        )
        return self._signed(unsigned)

    def _signed(self, unsigned: SignedRound) -> SignedRound:
        return dataclasses.replace(unsigned, signature=self.sign_hex(unsigned.message()))

    def sign_hex(self, message: bytes) -> str:
        """A signature over ``message`` (hex), for the other signed records of the archive
        (retention: docs/adr/0015-round-log.md)."""
        return self.sign_bytes(message).hex()

    def sign(self, *, saga_id: str, seq: int, hash: str, signed_at_us: int) -> Checkpoint:
        """A checkpoint for one head in the per-head form (``SGCP1``) of archives signed
        before rounds; verifiers still accept it."""
        message = checkpoint_message(
            saga_id=saga_id, seq=seq, hash=hash, signed_at_us=signed_at_us, key_id=self.key_id
        )
        return Checkpoint(
            saga_id=saga_id,
            seq=seq,
            hash=hash,
            signed_at_us=signed_at_us,
            key_id=self.key_id,
            signature=self._key.sign(message).hex(),
        )


def generate_key(path: str | Path) -> Signer:
    """Write a new Ed25519 private key to ``path`` (mode 0600, refusing to overwrite).

    Raises:
        SigningKeyError: the file exists or cannot be written.
    """
    return Signer(write_private_key(path))


def parse_public_key(text: str) -> bytes:
    """A raw 32-byte public key from hex, or from a file holding hex or a PEM public key.

    Raises:
        SigningKeyError: not an Ed25519 public key.
    """
    return _parse_public_key(text)


def bytes_signature_valid(public_raw: bytes, message: bytes, signature: str | None) -> bool:
    """Whether ``signature`` (hex) is ``public_raw``'s valid signature over ``message``."""
    return _signature_valid(public_raw, signature, message)


def signature_valid(public_raw: bytes, signed: Checkpoint | SignedRound) -> bool:
    """Whether a per-head checkpoint or a round carries a valid signature by ``public_raw``.

    One library signs and verifies (``cryptography``, RFC 8032); with heads signed in rounds
    (docs/adr/0012-checkpoint-rounds.md) a verify checks one signature per round, not per head.
    """
    return _signature_valid(public_raw, signed.signature, signed.message())


def leaves_in_order(log: RoundLog, *, up_to_round: int, fetch: int = 10_000) -> Iterator[bytes]:
    """Every leaf of the rounds up to ``up_to_round``, in log order (round, then leaf)."""
    with log.log_leaves(after=None, upto=up_to_round, fetch=fetch) as rows:
        for saga_id, seq, hash in rows:
            yield leaf_hash(saga_id=saga_id, seq=seq, hash=hash)


def log_tail(unit: SigningUnit) -> tuple[RootBuilder, str]:
    """The log as the last round left it (a builder over every leaf so far) and that round's
    root, inside the round's transaction ``unit``.

    The last round's stored frontier is used when it leads to its signed root; otherwise (the
    first round of the log after rounds of the first format, or a frontier that was altered)
    every leaf is read once.

    Raises:
        RoundLogError: the leaves no longer hash to the last round's signed root.
    """
    last = unit.last_round()
    if last is None:
        return RootBuilder(), FIRST_PREV_ROOT
    round_id, fmt, root = last.round_id, last.format, last.root
    tree_size, frontier = last.tree_size, last.frontier
    if fmt == LOG_ROUND_FORMAT and frontier is not None and tree_size is not None:
        try:
            builder = RootBuilder.from_frontier(tree_size, decode_frontier(frontier))
        except ValueError:
            pass
        else:
            got = builder.root()
            if got is not None and got.hex() == root:
                return builder, root
    builder = RootBuilder()
    for leaf in leaves_in_order(unit.log, up_to_round=round_id):
        builder.add(leaf)
    if fmt == LOG_ROUND_FORMAT and (
        builder.count != tree_size or (builder.root() or b"").hex() != root
    ):
        raise RoundLogError(
            f"the archive's checkpoints no longer hash to the root of signing round {round_id}"
            " (checkpoint rows were changed): refusing to extend the log; run sagacity verify"
        )
    return builder, root


def sign_pending(
    store: CheckpointSigning,
    signer: Signer,
    ledger: IngestLedger,
    *,
    chunk: int = 5_000,
    on_round: Callable[[SignedRound], None] | None = None,
    consumer_group: str | None = None,
    on_finding: Callable[[Finding], None] | None = None,
) -> int:
    """Sign every head this process attested and has not signed yet; return how many.

    The heads come from ``ledger`` — what this process read from the topic
    (docs/adr/0012-checkpoint-rounds.md, "The signer's input") — never from a table: a head
    the table shows otherwise is reported (``archive_finding``, ``head_moved``) and the
    attested one is signed, so a rewritten row fails ``verify`` against it.  Each chunk of up
    to ``chunk`` heads is one signing round in one transaction: the heads in saga id order are
    appended, as leaves, to the log of every head signed so far, and the log's new root is
    signed once with the previous round's root (docs/adr/0015-round-log.md); every head is
    stored as a checkpoint row naming its round and leaf index.  Signers of one archive take
    turns (an advisory lock), so the rounds form one log.

    ``on_round`` is called with each round once it is committed (to log or publish the latest
    round: a witness, docs/adr/0015-round-log.md).  With ``consumer_group``, once every
    attested head is signed, each partition's ``signed_offset`` moves to where the ledger had
    read it: a restart re-reads from there.  ``on_finding`` is told each finding committed.

    Raises:
        RoundLogError: the stored checkpoints no longer hash to the last signed root.
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    store.register_key(signer.key_id, signer.public_hex)
    pending = ledger.pending()
    handled = ledger.handled_offsets()
    total = 0
    for start in range(0, len(pending), chunk):
        heads = pending[start : start + chunk]
        signed, findings = _sign_round(store, signer, ledger, heads)
        ledger.mark_signed(heads)
        log_findings(findings)
        if on_finding is not None:
            for finding in findings:
                on_finding(finding)
        if signed is None:
            continue
        total += signed.leaf_count
        if on_round is not None:
            on_round(signed)
    if consumer_group is not None and handled:
        store.record_signed_offsets(consumer_group, handled)
    return total


def _where(entry: LedgerEntry | None) -> str:
    if entry is None or entry.offset is None:
        return ""
    return f" ({entry.topic} partition {entry.partition} offset {entry.offset})"


def _sign_round(
    store: CheckpointSigning,
    signer: Signer,
    ledger: IngestLedger,
    pending: list[tuple[str, int, str]],
) -> tuple[SignedRound | None, list[Finding]]:
    """Sign ``pending`` (attested heads, saga id order) as one round, leaving out those this
    key signed already (a round an earlier process committed before it could record so)."""
    with store.signing_round() as unit:
        findings = _moved_heads(unit, ledger, pending)
        done = unit.signed_by(pending, signer.key_id)
        unit.write_findings(findings)
        heads = [h for h in pending if (h[0], h[1]) not in done]
        if not heads:
            return None, findings
        builder, prev_root = log_tail(unit)
        round_id = unit.next_round_id()
        for s, n, h in heads:
            builder.add(leaf_hash(saga_id=s, seq=n, hash=h))
        root = builder.root()
        assert root is not None
        signed = signer.sign_log_round(
            round_id=round_id,
            tree_size=builder.count,
            leaf_count=len(heads),
            root=root.hex(),
            prev_root=prev_root,
            signed_at_us=now_micros(),
        )
        unit.record_round(signed, frontier=encode_frontier(builder.frontier()), heads=heads)
    return signed, findings


def _moved_heads(
    unit: SigningUnit, ledger: IngestLedger, pending: list[tuple[str, int, str]]
) -> list[Finding]:
    """A ``head_moved`` finding for each head of ``pending`` the head table no longer shows
    (its rows locked for the round), the saga stopped in ``ledger``; one per saga."""
    findings: list[Finding] = []
    table = unit.table_heads([h[0] for h in pending])
    for saga_id, seq, hash in pending:
        entry = ledger.get(saga_id)
        shown = table.get(saga_id)
        if shown != (seq, hash) and not (entry is not None and entry.flagged):
            if entry is not None:
                entry.flagged = entry.stopped = True
            findings.append(
                Finding(
                    reason=FindingReason.HEAD_MOVED,
                    saga_id=saga_id,
                    detail=f"the table's head is {describe(shown)} where this archiver read "
                    f"seq {seq} from the topic{_where(entry)}: the table was changed by "
                    f"something else; seq {seq} is signed, nothing past it",
                    ingested=(seq, hash),
                    table=shown,
                )
            )
    return findings
