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
import functools
import hashlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity._events import now_micros
from sagacity.consumers.archive._db import mapped_errors
from sagacity.errors import SigningKeyError

CHECKPOINT_MAGIC = b"SGCP1"
LEAF_MAGIC = b"SGCL1"
ROUND_MAGIC = b"SGCR1"
FIRST_PREV_ROOT = "0" * 64
"""The previous root of an archive's first signing round."""
_SIGNING_LOCK = 0x53474352  # with the schema's hash: one signer at a time per archive
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


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree, leaves first; a level's odd last node moves up unpaired (which
    is RFC 6962's split at the largest power of two below the size)."""
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        level = levels[-1]
        up = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
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
    ``None`` when the path does not fit the position (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size:
        return None
    fn, sn, node = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            node = _node(sibling, node)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            node = _node(node, sibling)
        fn >>= 1
        sn >>= 1
    return node if sn == 0 else None


class RootBuilder:
    """The root of leaves given one at a time, in O(log n) memory (a verifier streams a
    round's leaves from the database in leaf order)."""

    __slots__ = ("_stack", "count")

    def __init__(self) -> None:
        self._stack: list[tuple[bytes, int]] = []
        self.count = 0

    def add(self, leaf: bytes) -> None:
        """Append the next leaf."""
        stack = self._stack
        node, size = leaf, 1
        while stack and stack[-1][1] == size:
            left, _ = stack.pop()
            node, size = _node(left, node), size * 2
        stack.append((node, size))
        self.count += 1

    def root(self) -> bytes | None:
        """The root so far (``None`` before the first leaf)."""
        if not self._stack:
            return None
        node = self._stack[-1][0]
        for left, _ in reversed(self._stack[:-1]):
            node = _node(left, node)
        return node


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


@dataclass(frozen=True, kw_only=True)
class SignedRound:
    """One signing round: the root over its heads, signed once."""

    round_id: int
    leaf_count: int
    root: str
    prev_root: str
    signed_at_us: int
    key_id: str
    signature: str

    def message(self) -> bytes:
        """The signed bytes."""
        return round_message(
            round_id=self.round_id,
            leaf_count=self.leaf_count,
            root=self.root,
            prev_root=self.prev_root,
            signed_at_us=self.signed_at_us,
            key_id=self.key_id,
        )


def key_id_of(public_raw: bytes) -> str:
    """The short id of a raw Ed25519 public key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


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


class Signer:
    """Signs checkpoints with an Ed25519 private key read from a file."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_hex = self.public_raw.hex()
        self.key_id = key_id_of(self.public_raw)

    @classmethod
    def from_file(cls, path: str | Path) -> Signer:
        """Load a PEM (PKCS#8) Ed25519 private key, as written by :func:`generate_key`.

        Raises:
            SigningKeyError: the file is missing, unreadable or not an Ed25519 private key.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror}") from exc
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"{path} is not a PEM private key: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
        return cls(key)

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
        return dataclasses.replace(unsigned, signature=self._key.sign(unsigned.message()).hex())

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
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise SigningKeyError(f"{path} exists; refusing to overwrite a signing key") from exc
    except OSError as exc:
        raise SigningKeyError(f"cannot create {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return Signer(key)


def parse_public_key(text: str) -> bytes:
    """A raw 32-byte public key from hex, or from a file holding hex or a PEM public key.

    Raises:
        SigningKeyError: not an Ed25519 public key.
    """
    candidate = text.strip()
    path = Path(candidate)
    if len(candidate) != 64 and path.is_file():
        data = path.read_bytes()
        if b"BEGIN" in data:
            try:
                key = serialization.load_pem_public_key(data)
            except ValueError as exc:
                raise SigningKeyError(f"{path} is not a PEM public key: {exc}") from exc
            if not isinstance(key, Ed25519PublicKey):
                raise SigningKeyError(f"{path} is not an Ed25519 public key")
            return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        candidate = data.decode("ascii", "replace").strip()
    try:
        raw = bytes.fromhex(candidate)
    except ValueError as exc:
        raise SigningKeyError("public key must be 64 hex characters or a key file") from exc
    if len(raw) != 32:
        raise SigningKeyError("an Ed25519 public key is 32 bytes (64 hex characters)")
    return raw


@functools.lru_cache(maxsize=64)
def _verify_key(public_raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(public_raw)


def signature_valid(public_raw: bytes, signed: Checkpoint | SignedRound) -> bool:
    """Whether a per-head checkpoint or a round carries a valid signature by ``public_raw``.

    One library signs and verifies (``cryptography``, RFC 8032); with heads signed in rounds
    (docs/adr/0012-checkpoint-rounds.md) a verify checks one signature per round, not per head.
    """
    if signed.signature is None:
        return False
    try:
        sig = bytes.fromhex(signed.signature)
        _verify_key(public_raw).verify(sig, signed.message())
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def sign_pending(
    conn: psycopg.Connection,
    signer: Signer,
    *,
    chunk: int = 5_000,
    on_round: Callable[[SignedRound], None] | None = None,
) -> int:
    """Sign every archived head that moved since it was last signed; return how many.

    Each chunk of up to ``chunk`` heads is one signing round in one transaction: the heads in
    saga id order are the leaves of a Merkle tree whose root is signed once, with the previous
    round's root (docs/adr/0012-checkpoint-rounds.md); every head is stored as a checkpoint row
    naming its round and leaf index.  Signers of one archive take turns (an advisory lock), so
    the rounds form one chain.  Memory stays flat however many sagas there are.

    ``on_round`` is called with each round once it is committed (to log or publish the latest
    round's id and root: docs/adr/0012-checkpoint-rounds.md).
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    total = 0
    with mapped_errors("register the signing key"), conn.transaction():
        conn.execute(
            "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)"
            " ON CONFLICT (key_id) DO NOTHING",
            (signer.key_id, signer.public_hex),
        )
    while True:
        with mapped_errors("sign archived heads"), conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_SIGNING_LOCK,)
            )
            heads = conn.execute(
                "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
                ' WHERE head_seq > checkpointed_seq ORDER BY saga_id COLLATE "C" LIMIT %s'
                " FOR UPDATE",
                (chunk,),
            ).fetchall()
            if not heads:
                return total
            last = conn.execute(
                "SELECT root FROM archive_checkpoint_round ORDER BY round_id DESC LIMIT 1"
            ).fetchone()
            row = conn.execute("SELECT nextval('archive_checkpoint_round_id_seq')").fetchone()
            assert row is not None
            leaves = [leaf_hash(saga_id=s, seq=int(n), hash=h) for s, n, h in heads]
            signed = signer.sign_round(
                round_id=int(row[0]),
                leaf_count=len(leaves),
                root=merkle_root(leaves).hex(),
                prev_root=last[0] if last is not None else FIRST_PREV_ROOT,
                signed_at_us=now_micros(),
            )
            conn.execute(
                "INSERT INTO archive_checkpoint_round (round_id, leaf_count, root, prev_root,"
                " signed_at_us, key_id, signature) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (
                    signed.round_id,
                    signed.leaf_count,
                    signed.root,
                    signed.prev_root,
                    signed.signed_at_us,
                    signed.key_id,
                    signed.signature,
                ),
            )
            with conn.cursor().copy(
                "COPY archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id, round_id,"
                " leaf_index) FROM STDIN"
            ) as copy:
                for index, (saga_id, seq, hash) in enumerate(heads):
                    copy.write_row(
                        (
                            saga_id,
                            seq,
                            hash,
                            signed.signed_at_us,
                            signed.key_id,
                            signed.round_id,
                            index,
                        )
                    )
            conn.execute(
                "UPDATE archive_saga_head h SET checkpointed_seq = u.seq"
                " FROM unnest(%s::text[], %s::bigint[]) AS u(saga_id, seq)"
                " WHERE h.saga_id = u.saga_id",
                ([h[0] for h in heads], [h[1] for h in heads]),
            )
            total += len(heads)
        if on_round is not None:
            on_round(signed)
