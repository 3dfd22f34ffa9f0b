"""Per-saga data keys for erasure: the key service and the key-encryption key (ADR 0019).

The public face of :mod:`sagacity._envelope` (sealing fields under a saga's data key, the
key-encryption key that wraps data keys) and :mod:`sagacity._keys` (the key service over a key
store).  See docs/operations/keys.md.
"""

from __future__ import annotations

from sagacity._envelope import KEK_SETTING, KeyEncryptionKey, KeyRing, write_key_encryption_key
from sagacity._keys import Destruction, KeyService, KeyStore, Rotation, StoredKey

__all__ = [
    "KEK_SETTING",
    "Destruction",
    "KeyEncryptionKey",
    "KeyRing",
    "KeyService",
    "KeyStore",
    "Rotation",
    "StoredKey",
    "write_key_encryption_key",
]
