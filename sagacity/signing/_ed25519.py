"""Ed25519 keys as every signer of the product keeps them (``cryptography``, RFC 8032).

One place for what the approvals service's decisions, the writers' events and the archive's
checkpoints, rounds and retention records all do with keys: write a private key file (PEM,
mode 0600, never overwritten), load it, name a public key by its id, read a pinned public key
(hex, or a file holding hex or PEM) and check a signature.  ``cryptography`` is imported on
first use, so importing this module costs nothing where nothing signs.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self

from sagacity.errors import ConfigurationError, SigningKeyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )


def key_id_of(public_raw: bytes) -> str:
    """The short id of a raw Ed25519 public key: 16 hex characters of its SHA-256."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def public_raw_of(private_key: Ed25519PrivateKey) -> bytes:
    """The raw 32 bytes of a private key's public half."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def write_private_key(path: str | Path) -> Ed25519PrivateKey:
    """Write a new Ed25519 private key to ``path`` (PEM, mode 0600, refusing to overwrite).

    Raises:
        SigningKeyError: the file exists or cannot be written.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
    return key


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The PEM (PKCS#8) Ed25519 private key in ``path``, as :func:`write_private_key` wrote it.

    Raises:
        SigningKeyError: the file is missing, unreadable or not an Ed25519 private key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
    return key


def parse_public_key(text: str, *, what: str = "public key") -> bytes:
    """A raw 32-byte public key from hex, or from a file holding hex or a PEM public key.

    Raises:
        SigningKeyError: not an Ed25519 public key (the message starts with ``what``).
    """
    candidate = text.strip()
    path = Path(candidate)
    if len(candidate) != 64 and path.is_file():
        data = path.read_bytes()
        if b"BEGIN" in data:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

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
        raise SigningKeyError(
            f"{what} {candidate[:80]!r} is not 64 hex characters or a key file"
        ) from exc
    if len(raw) != 32:
        raise SigningKeyError("an Ed25519 public key is 32 bytes (64 hex characters)")
    return raw


@functools.lru_cache(maxsize=64)
def _public(public_raw: bytes) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(public_raw)


def signature_valid(public_raw: bytes, signature: bytes | str | None, message: bytes) -> bool:
    """Whether ``signature`` (raw bytes, or hex) is ``public_raw``'s over ``message``."""
    from cryptography.exceptions import InvalidSignature

    if signature is None:
        return False
    try:
        raw = bytes.fromhex(signature) if isinstance(signature, str) else signature
        _public(public_raw).verify(raw, message)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


class KeyHolder:
    """An Ed25519 private key with its public half and key id: what every signer of the
    product (decisions, operator events, checkpoints) holds.  Subclasses add what they sign."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_raw = public_raw_of(private_key)
        self.public_hex = self.public_raw.hex()
        self.key_id = key_id_of(self.public_raw)

    @classmethod
    def from_file(cls, path: str | Path) -> Self:
        """Load a PEM (PKCS#8) Ed25519 private key, as :func:`write_private_key` writes it.

        Raises:
            SigningKeyError: the file is missing, unreadable or not an Ed25519 private key.
        """
        return cls(load_private_key(path))

    def sign_bytes(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message`` (a caller's own domain-separated form)."""
        return self._key.sign(message)


class PinnedKeys:
    """Ed25519 public keys pinned to verify one kind of signature (several during a key
    rotation), by key id: what every verifier of the product holds.

    Args:
        public_keys: raw 32-byte public keys.

    Raises:
        ConfigurationError: no key.
    """

    name = "a verifier"
    """What the holder is, in messages (``"a decision verifier"``)."""
    what = "public key"
    """What the keys are, in messages (``"approvals public key"``)."""
    setting = ""
    """The setting the keys are read from, named in a refusal."""

    def __init__(self, public_keys: Iterable[bytes]) -> None:
        keys = {key_id_of(raw): raw for raw in public_keys}
        if not keys:
            raise ConfigurationError(f"{self.name} needs at least one public key")
        self._keys: Mapping[str, bytes] = keys

    @classmethod
    def parse(cls, text: str) -> Self:
        """Keys from ``text``: hex or key files (hex or PEM), separated by commas or spaces.

        Raises:
            ConfigurationError: empty, or an item is not an Ed25519 public key.
        """
        items = [part for part in text.replace(",", " ").split() if part]
        try:
            return cls(parse_public_key(item, what=cls.what) for item in items)
        except SigningKeyError as exc:
            raise ConfigurationError(f"{cls.setting}: {exc.message}") from exc

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the pinned keys."""
        return tuple(self._keys)

    @property
    def public_keys(self) -> tuple[bytes, ...]:
        """The pinned raw public keys."""
        return tuple(self._keys.values())
