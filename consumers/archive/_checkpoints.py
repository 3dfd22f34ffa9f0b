"""Signed checkpoints: Ed25519 signatures over archived chain heads.

A checkpoint states "saga S had reached seq N with hash H at time T", signed with a key kept
outside the database.  The signed message (reimplemented by the standalone bundle verifier)::

    "SGCP1" || F(saga_id) || F(int64_be(seq)) || F(hash) || F(int64_be(signed_at_us)) || F(key_id)

with ``F`` the length-prefixed field of docs/adr/0002-hash-chain.md (text as UTF-8; ``hash``
and ``key_id`` as their lowercase hex text).  ``key_id`` is the first 16 hex characters of the
SHA-256 of the raw 32-byte public key.  See docs/adr/0006-archive-and-checkpoints.md.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import psycopg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from sagacity._events import now_micros
from sagacity.consumers.archive._db import mapped_errors
from sagacity.errors import SigningKeyError

CHECKPOINT_MAGIC = b"SGCP1"
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


def key_id_of(public_raw: bytes) -> str:
    """The short id of a raw Ed25519 public key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One signed head."""

    saga_id: str
    seq: int
    hash: str
    signed_at_us: int
    key_id: str
    signature: str

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

    def sign(self, *, saga_id: str, seq: int, hash: str, signed_at_us: int) -> Checkpoint:
        """A checkpoint for one head."""
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
def _verify_key(public_raw: bytes) -> VerifyKey:
    return VerifyKey(public_raw)


def signature_valid(public_raw: bytes, checkpoint: Checkpoint) -> bool:
    """Whether ``checkpoint`` carries a valid signature by ``public_raw``.

    Verified by libsodium (PyNaCl): about 2.5 times faster than OpenSSL's Ed25519 here, and it
    releases the GIL, so :func:`sagacity.consumers.archive.audit` checks signatures on worker
    threads.  Signing stays with ``cryptography`` (PEM keys); both implement RFC 8032.
    """
    try:
        sig = bytes.fromhex(checkpoint.signature)
        _verify_key(public_raw).verify(checkpoint.message(), sig)
    except (ValueError, TypeError, CryptoError):
        return False
    return True


def sign_pending(conn: psycopg.Connection, signer: Signer, *, chunk: int = 5_000) -> int:
    """Sign every archived head that moved since it was last signed; return how many.

    Works in chunks of ``chunk`` heads, one transaction each, so memory stays flat however
    many sagas there are.
    """
    total = 0
    with mapped_errors("register the signing key"), conn.transaction():
        conn.execute(
            "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)"
            " ON CONFLICT (key_id) DO NOTHING",
            (signer.key_id, signer.public_hex),
        )
    while True:
        with mapped_errors("sign archived heads"), conn.transaction():
            heads = conn.execute(
                "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
                " WHERE head_seq > checkpointed_seq ORDER BY saga_id LIMIT %s FOR UPDATE",
                (chunk,),
            ).fetchall()
            if not heads:
                return total
            at = now_micros()
            signed = [
                signer.sign(saga_id=s, seq=int(n), hash=h, signed_at_us=at) for s, n, h in heads
            ]
            with conn.cursor().copy(
                "COPY archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id, signature)"
                " FROM STDIN"
            ) as copy:
                for c in signed:
                    copy.write_row(
                        (c.saga_id, c.seq, c.hash, c.signed_at_us, c.key_id, c.signature)
                    )
            conn.execute(
                "UPDATE archive_saga_head h SET checkpointed_seq = u.seq"
                " FROM unnest(%s::text[], %s::bigint[]) AS u(saga_id, seq)"
                " WHERE h.saga_id = u.saga_id",
                ([c.saga_id for c in signed], [c.seq for c in signed]),
            )
            total += len(signed)
