"""Per-writer signing: who produced an event, provable to the archive (optional, off by default).

Every event the Kafka journal writes carries its writer's id in the ``writer`` attribute
(hashed into the chain).  A writer given a key also sends, in the Kafka header
``sagacity_writer_sig``, a MAC or signature over::

    "SGCW1" || F(writer) || F(saga_id) || F(int64_be(seq)) || F(hash as 64 hex)

(``F`` as in docs/adr/0002-hash-chain.md; ``hash`` covers every field of the event, its
attributes and its previous hash).  The archive, given a registry of writers and their keys,
refuses events from unregistered writers and events whose signature does not verify
(docs/adr/0014-signed-decisions-and-writers.md).  HMAC-SHA256 costs a microsecond or two per
event; Ed25519 (``cryptography``, imported only when used) lets the archive hold only public
keys.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagacity.chain._form import framed as _field
from sagacity.errors import ConfigurationError, SigningKeyError
from sagacity.signing._writer_roles import RegisteredWriter
from sagacity.signing._writer_roles import WriterRole as WriterRole

WRITER_MAGIC = b"SGCW1"
HEADER = "sagacity_writer_sig"
"""The Kafka header carrying the writer's signature (hex)."""
KEY_ENV = "SAGACITY_WRITER_KEY"
HMAC_PREFIX = "hmac-sha256:"
HMAC = "hmac-sha256"
ED25519 = "ed25519"


class Reason:
    """Why the archive refuses an event's authorship (its quarantine reasons)."""

    UNREGISTERED = "unregistered_writer"
    UNSIGNED = "unsigned_writer"
    BAD_SIGNATURE = "bad_writer_signature"


def writer_message(*, writer: str, saga_id: str, seq: int, hash: str) -> bytes:
    """The exact bytes a writer signature covers (``SGCW1``)."""
    return b"".join(
        (
            WRITER_MAGIC,
            _field(writer.encode("utf-8")),
            _field(saga_id.encode("utf-8")),
            _field(struct.pack(">q", seq)),
            _field(hash.encode("ascii")),
        )
    )


class WriterKey:
    """One writer's signing key: an HMAC secret or an Ed25519 private key.

    Args:
        writer_id: the id the writer journals under (registered with the archive).
        algorithm: ``"hmac-sha256"`` or ``"ed25519"``.
        secret: the HMAC secret, or the PEM of the Ed25519 private key.
    """

    def __init__(self, writer_id: str, algorithm: str, secret: bytes) -> None:
        if not writer_id:
            raise ConfigurationError("a writer key needs the writer's id")
        self.writer_id = writer_id
        self.algorithm = algorithm
        if algorithm == HMAC:
            if len(secret) < 16:
                raise SigningKeyError("an HMAC writer secret must be at least 16 bytes")
            self._secret = secret
            self.registry_value = secret.hex()
        elif algorithm == ED25519:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            try:
                key = serialization.load_pem_private_key(secret, password=None)
            except (ValueError, TypeError) as exc:
                raise SigningKeyError(f"not a PEM private key: {exc}") from exc
            if not isinstance(key, Ed25519PrivateKey):
                raise SigningKeyError(f"a {type(key).__name__}, not an Ed25519 key")
            self._private = key
            self.registry_value = (
                key.public_key()
                .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
                .hex()
            )
        else:
            raise ConfigurationError(f"unknown writer key algorithm {algorithm!r}")

    @classmethod
    def from_file(cls, path: str | Path, writer_id: str) -> WriterKey:
        """Load ``path``: ``hmac-sha256:<hex secret>``, or a PEM Ed25519 private key.

        Raises:
            SigningKeyError: the file is unreadable or holds neither.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"cannot read writer key {path}: {exc.strerror}") from exc
        text = data.decode("ascii", "replace").strip()
        if text.startswith(HMAC_PREFIX):
            try:
                secret = bytes.fromhex(text[len(HMAC_PREFIX) :])
            except ValueError as exc:
                raise SigningKeyError(f"{path}: the HMAC secret is not hex") from exc
            return cls(writer_id, HMAC, secret)
        try:
            return cls(writer_id, ED25519, data)
        except SigningKeyError as exc:
            raise SigningKeyError(f"{path}: {exc.message}") from exc

    def sign(self, *, saga_id: str, seq: int, hash: str) -> bytes:
        """The header value for an event (hex, ASCII bytes)."""
        message = writer_message(writer=self.writer_id, saga_id=saga_id, seq=seq, hash=hash)
        if self.algorithm == HMAC:
            return hmac.new(self._secret, message, hashlib.sha256).hexdigest().encode()
        return self._private.sign(message).hex().encode()

    def registry_entry(self, role: WriterRole = WriterRole.AGENT) -> str:
        """This writer's entry for the archive's writer registry (TOML), with its ``role``
        (docs/adr/0014-signed-decisions-and-writers.md §5; an agent's is left implicit)."""
        name = self.writer_id.replace("\\", "\\\\").replace('"', '\\"')
        field = "hmac_sha256" if self.algorithm == HMAC else "ed25519"
        entry = f'[writers."{name}"]\n{field} = "{self.registry_value}"\n'
        if role is not WriterRole.AGENT:
            entry += f'role = "{role.value}"\n'
        return entry


@dataclass(frozen=True)
class _Registered:
    algorithm: str
    key: bytes
    role: WriterRole = WriterRole.AGENT


class WriterRegistry:
    """The writers the archive accepts events from, each with its key.

    Args:
        writers: writer id -> (``"hmac-sha256"`` and the secret, or ``"ed25519"`` and the raw
            public key).
        roles: writer id -> its role (docs/adr/0014 §5); a writer not named is an agent.
    """

    def __init__(
        self,
        writers: Mapping[str, tuple[str, bytes]],
        roles: Mapping[str, WriterRole] | None = None,
    ) -> None:
        roles = roles or {}
        self._writers = {
            w: _Registered(a, k, roles.get(w, WriterRole.AGENT)) for w, (a, k) in writers.items()
        }

    @classmethod
    def from_file(cls, path: str | Path) -> WriterRegistry:
        """A TOML file of ``[writers."ID"]`` tables, each with ``hmac_sha256 = "<hex>"`` or
        ``ed25519 = "<hex public key>"``, and optionally ``role`` (``agent``, the default;
        ``approvals``, ``compensation`` or ``operator``: docs/adr/0014 §5).

        Raises:
            ConfigurationError: unreadable, not TOML, or an entry without a valid key.
        """
        try:
            data: dict[str, Any] = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"writer registry {path}: {exc}") from exc
        table = data.get("writers", {})
        if not isinstance(table, dict):
            raise ConfigurationError(f"writer registry {path}: [writers] must be a table")
        writers: dict[str, tuple[str, bytes]] = {}
        roles: dict[str, WriterRole] = {}
        for writer, entry in table.items():
            if isinstance(entry, dict) and "role" in entry:
                entry = dict(entry)
                role = entry.pop("role")
                try:
                    roles[writer] = WriterRole(role)
                except ValueError as exc:
                    raise ConfigurationError(
                        f"writer registry {path}: writer {writer!r}: role {role!r} is not one "
                        f"of {', '.join(r.value for r in WriterRole)}"
                    ) from exc
            if not isinstance(entry, dict) or len(entry) != 1:
                raise ConfigurationError(
                    f"writer registry {path}: writer {writer!r} needs exactly one of "
                    "hmac_sha256 or ed25519 (and optionally a role)"
                )
            [(field, value)] = entry.items()
            try:
                raw = bytes.fromhex(str(value))
            except ValueError as exc:
                raise ConfigurationError(
                    f"writer registry {path}: writer {writer!r}: {field} is not hex"
                ) from exc
            if field == "hmac_sha256" and len(raw) >= 16:
                writers[writer] = (HMAC, raw)
            elif field == "ed25519" and len(raw) == 32:
                writers[writer] = (ED25519, raw)
            else:
                raise ConfigurationError(
                    f"writer registry {path}: writer {writer!r}: {field} is not a valid key "
                    "(hmac_sha256: at least 16 bytes; ed25519: a 32-byte public key)"
                )
        return cls(writers, roles)

    def __len__(self) -> int:
        return len(self._writers)

    def registered(self, writer: str | None) -> RegisteredWriter | None:
        """``writer``'s registry entry (its id and role), ``None`` when not registered."""
        found = self._writers.get(writer) if writer is not None else None
        return None if found is None else RegisteredWriter(writer_id=writer or "", role=found.role)

    def check(
        self, *, writer: str | None, saga_id: str, seq: int, hash: str, signature: bytes | None
    ) -> tuple[str, str] | None:
        """``None`` when the event's writer is registered and its signature verifies, else
        ``(reason, detail)``."""
        if writer is None:
            return Reason.UNREGISTERED, "the event names no writer (no writer attribute)"
        registered = self._writers.get(writer)
        if registered is None:
            return Reason.UNREGISTERED, f"writer {writer!r} is not in the writer registry"
        if signature is None:
            return Reason.UNSIGNED, f"writer {writer!r} sent no {HEADER} header"
        message = writer_message(writer=writer, saga_id=saga_id, seq=seq, hash=hash)
        try:
            given = bytes.fromhex(signature.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return Reason.BAD_SIGNATURE, f"writer {writer!r}: the signature is not hex"
        if registered.algorithm == HMAC:
            expected = hmac.new(registered.key, message, hashlib.sha256).digest()
            ok = hmac.compare_digest(expected, given)
        else:
            ok = _ed25519_valid(registered.key, given, message)
        if not ok:
            return Reason.BAD_SIGNATURE, f"writer {writer!r}: the signature does not verify"
        return None


def _ed25519_valid(public_raw: bytes, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
