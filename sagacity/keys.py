"""Per-saga data keys for erasure: the key service and the key-encryption key (ADR 0019).

The public face of :mod:`sagacity.privacy._envelope` (sealing fields under a saga's data key, the
key-encryption key that wraps data keys) and :mod:`sagacity.privacy._keys` (the key service over
the key store's port, :class:`sagacity.ports.KeyStore`).  See docs/operations/keys.md.
"""

from __future__ import annotations

from sagacity.privacy._envelope import (
    KEK_SETTING,
    KeyEncryptionKey,
    KeyRing,
    write_key_encryption_key,
)
from sagacity.privacy._keys import Destruction, KeyService, Rotation

__all__ = [
    "KEK_SETTING",
    "Destruction",
    "KeyEncryptionKey",
    "KeyRing",
    "KeyService",
    "Rotation",
    "write_key_encryption_key",
]
