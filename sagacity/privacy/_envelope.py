"""Envelope encryption of journal fields: per-saga data keys, wrapped by a key-encryption key.

The pure half of the key service (no database): AES-256-GCM (``cryptography``) seals a field
under its saga's 32-byte data key, with associated data binding the saga id, the event's seq
and the field's name, so a sealed field opens only where it was sealed; a data key is stored
wrapped (AES-256-GCM again) under a key-encryption key (KEK) kept outside the database, with
associated data binding the KEK's id and the saga id.  See docs/adr/0019-erasure.md.

Formats (``F`` is the length-prefixed field of docs/adr/0002-hash-chain.md)::

    sealed  = "SGE1" || nonce (12) || AES-256-GCM(data key, nonce, plaintext, ad) (len + 16)
    ad      = "SGE1" || F(saga_id) || F(int64_be(seq)) || F(field)
    wrapped = "SGW1" || nonce (12) || AES-256-GCM(KEK, nonce, data key, "SGW1" || F(kek_id)
                                                  || F(saga_id)) (32 + 16)
    KEK file: "sagacity-kek-1:" hex(32 random bytes) "\\n", mode 0600
    kek_id  = first 16 hex characters of SHA-256("sagacity-kek-id" || KEK)

Nonces are random: a data key seals one saga's fields, far fewer than the 2^32 messages a
random 96-bit nonce is safe for.  ``cryptography`` is imported on first use.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sagacity.chain import framed as _f
from sagacity.errors import (
    CiphertextAuthenticationError,
    InvalidArgumentError,
    KeyEncryptionKeyError,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEK_SETTING = "SAGACITY_KEY_ENCRYPTION_KEY_FILE"
"""The variable naming the key-encryption key file(s); the first is used to wrap new keys."""

KEK_PREFIX = "sagacity-kek-1:"
SEALED_MAGIC = b"SGE1"
WRAPPED_MAGIC = b"SGW1"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
SEAL_OVERHEAD = len(SEALED_MAGIC) + NONCE_BYTES + TAG_BYTES
"""Bytes a sealed field adds to its plaintext."""

_INT64 = struct.Struct(">q").pack


def _aead(key: bytes) -> AESGCM:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def seal_ad(saga_id: str, seq: int, field_name: str) -> bytes:
    """The associated data a field is sealed with: where it belongs, bound into its tag."""
    return SEALED_MAGIC + _f(saga_id.encode()) + _f(_INT64(seq)) + _f(field_name.encode())


def _wrap_ad(kek_id: str, saga_id: str) -> bytes:
    return WRAPPED_MAGIC + _f(kek_id.encode()) + _f(saga_id.encode())


@dataclass(frozen=True)
class DataKey:
    """One saga's data key, ready to seal and open its fields.

    Attributes:
        saga_id: the saga the key belongs to (and the only one it opens fields of).
    """

    saga_id: str
    _aead: AESGCM = field(repr=False)
    _raw: bytes = field(repr=False)

    @classmethod
    def generate(cls, saga_id: str) -> tuple[DataKey, bytes]:
        """A fresh random key for ``saga_id`` and its raw bytes (to be wrapped, then dropped)."""
        raw = secrets.token_bytes(KEY_BYTES)
        return cls(saga_id, _aead(raw), raw), raw

    @classmethod
    def of(cls, saga_id: str, raw: bytes) -> DataKey:
        """The key whose raw 32 bytes are ``raw`` (as unwrapped)."""
        return cls(saga_id, _aead(raw), raw)

    @property
    def material(self) -> bytes:
        """The raw key, for the compiled sealer in this process (it never leaves it)."""
        return self._raw

    def seal(self, seq: int, field_name: str, plaintext: bytes) -> bytes:
        """``plaintext`` sealed for (this saga, ``seq``, ``field_name``).

        Raises:
            InvalidArgumentError: ``plaintext`` is not bytes.
        """
        if not isinstance(plaintext, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                f"a sealed field must be bytes, not {type(plaintext).__name__}",
                saga_id=self.saga_id,
                seq=seq,
            )
        nonce = os.urandom(NONCE_BYTES)
        body = self._aead.encrypt(nonce, bytes(plaintext), seal_ad(self.saga_id, seq, field_name))
        return SEALED_MAGIC + nonce + body

    def open(self, seq: int, field_name: str, sealed: bytes) -> bytes:
        """The plaintext of ``sealed``, checked to be this saga's field ``field_name`` at ``seq``.

        Raises:
            CiphertextAuthenticationError: "authentication failed": the bytes were altered,
                sealed under another key, or for another saga, seq or field.
        """
        from cryptography.exceptions import InvalidTag

        where = f"saga {self.saga_id!r} seq {seq} field {field_name!r}"
        if len(sealed) < SEAL_OVERHEAD or bytes(sealed[:4]) != SEALED_MAGIC:
            raise CiphertextAuthenticationError(
                f"authentication failed: {where} is not a sealed field",
                saga_id=self.saga_id,
                seq=seq,
                field=field_name,
            )
        nonce, body = bytes(sealed[4:16]), bytes(sealed[16:])
        try:
            return self._aead.decrypt(nonce, body, seal_ad(self.saga_id, seq, field_name))
        except InvalidTag as exc:
            raise CiphertextAuthenticationError(
                f"authentication failed: {where} was altered, or sealed under another key "
                "or for another place",
                saga_id=self.saga_id,
                seq=seq,
                field=field_name,
            ) from exc


@dataclass(frozen=True)
class KeyEncryptionKey:
    """A key-encryption key: wraps and unwraps data keys; never stored in the database.

    Attributes:
        key_id: 16 hex characters naming the key (stored beside each key it wraps).
        source: where it was read from, for messages.
    """

    key_id: str
    source: str = field(compare=False)
    _aead: AESGCM = field(repr=False, compare=False)

    @classmethod
    def of(cls, raw: bytes, *, source: str = "<bytes>") -> KeyEncryptionKey:
        """The KEK whose raw 32 bytes are ``raw``.

        Raises:
            KeyEncryptionKeyError: ``raw`` is not 32 bytes.
        """
        if len(raw) != KEY_BYTES:
            raise KeyEncryptionKeyError(
                f"{source}: a key-encryption key is {KEY_BYTES} bytes, not {len(raw)}",
                setting=KEK_SETTING,
            )
        key_id = hashlib.sha256(b"sagacity-kek-id" + raw).hexdigest()[:16]
        return cls(key_id, source, _aead(raw))

    @classmethod
    def from_file(cls, path: str | Path, *, setting: str = KEK_SETTING) -> KeyEncryptionKey:
        """The KEK in ``path``, as :func:`write_key_encryption_key` wrote it.

        Raises:
            KeyEncryptionKeyError: the file is missing, unreadable or not a KEK (the message
                names ``setting``).
        """
        try:
            text = Path(path).read_text("ascii").strip()
        except FileNotFoundError as exc:
            raise KeyEncryptionKeyError(f"{path} does not exist", setting=setting) from exc
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not a text file"
            raise KeyEncryptionKeyError(f"cannot read {path}: {reason}", setting=setting) from exc
        hex_key = text.removeprefix(KEK_PREFIX)
        try:
            raw = bytes.fromhex(hex_key) if text.startswith(KEK_PREFIX) else b""
        except ValueError:
            raw = b""
        if len(raw) != KEY_BYTES:
            raise KeyEncryptionKeyError(
                f"{path} is not a key-encryption key (write one with `sagacity keys init`)",
                setting=setting,
            )
        return cls.of(raw, source=str(path))

    def wrap(self, saga_id: str, raw_data_key: bytes) -> bytes:
        """``raw_data_key`` wrapped for storage as ``saga_id``'s key."""
        nonce = os.urandom(NONCE_BYTES)
        body = self._aead.encrypt(nonce, raw_data_key, _wrap_ad(self.key_id, saga_id))
        return WRAPPED_MAGIC + nonce + body

    def unwrap(self, saga_id: str, wrapped: bytes) -> bytes:
        """The raw data key ``wrapped`` holds for ``saga_id``.

        Raises:
            CiphertextAuthenticationError: "authentication failed": the wrapped key was
                altered, is another saga's, or was wrapped under another KEK.
        """
        from cryptography.exceptions import InvalidTag

        if len(wrapped) != 4 + NONCE_BYTES + KEY_BYTES + TAG_BYTES or wrapped[:4] != WRAPPED_MAGIC:
            raise CiphertextAuthenticationError(
                f"authentication failed: the stored data key of saga {saga_id!r} is not a "
                "wrapped key",
                saga_id=saga_id,
            )
        try:
            return self._aead.decrypt(wrapped[4:16], wrapped[16:], _wrap_ad(self.key_id, saga_id))
        except InvalidTag as exc:
            raise CiphertextAuthenticationError(
                f"authentication failed: the stored data key of saga {saga_id!r} does not "
                f"open under key-encryption key {self.key_id} (altered, another saga's, or "
                "wrapped under another key)",
                saga_id=saga_id,
            ) from exc


@dataclass(frozen=True)
class KeyRing:
    """The KEKs a process holds: the first wraps new data keys, every one unwraps.

    More than one is held only during a rotation (docs/adr/0019-erasure.md §6).
    """

    keys: tuple[KeyEncryptionKey, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyEncryptionKeyError("no key-encryption key given", setting=KEK_SETTING)

    @property
    def primary(self) -> KeyEncryptionKey:
        """The KEK new data keys are wrapped under."""
        return self.keys[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of every KEK held, the primary first."""
        return tuple(k.key_id for k in self.keys)

    def get(self, key_id: str) -> KeyEncryptionKey | None:
        """The KEK named ``key_id``, if held."""
        return next((k for k in self.keys if k.key_id == key_id), None)

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], *, setting: str = KEK_SETTING) -> KeyRing:
        """The KEKs in ``paths``, the first the primary.

        Raises:
            KeyEncryptionKeyError: a file is missing or not a KEK, or none is given.
        """
        return cls(tuple(KeyEncryptionKey.from_file(p, setting=setting) for p in paths))

    @classmethod
    def from_setting(cls, value: str | None, *, setting: str = KEK_SETTING) -> KeyRing:
        """The KEKs named by ``value``: one path, or comma-separated paths (primary first).

        Raises:
            KeyEncryptionKeyError: ``value`` is unset or empty, or names a bad file.
        """
        paths = [p.strip() for p in (value or "").split(",") if p.strip()]
        if not paths:
            raise KeyEncryptionKeyError(
                "not set; name the key-encryption key file (write one with "
                "`sagacity keys init --out FILE`)",
                setting=setting,
            )
        return cls.from_files(paths, setting=setting)


def write_key_encryption_key(path: str | Path) -> KeyEncryptionKey:
    """Write a new random KEK to ``path`` (mode 0600, refusing to overwrite).

    Raises:
        KeyEncryptionKeyError: the file exists or cannot be created.
    """
    raw = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise KeyEncryptionKeyError(
            f"{path} exists; refusing to overwrite a key-encryption key", setting="--out"
        ) from exc
    except OSError as exc:
        raise KeyEncryptionKeyError(
            f"cannot create {path}: {exc.strerror}", setting="--out"
        ) from exc
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(f"{KEK_PREFIX}{raw.hex()}\n")
    return KeyEncryptionKey.of(raw, source=str(path))
