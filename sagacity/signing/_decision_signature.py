"""Signed decisions: the approvals service's Ed25519 signature over each decision it journals.

A decision on the topic is only as trustworthy as whoever could produce it, and every agent
can produce to the journal topic.  The approvals service therefore signs each decision with a
key only it holds, and every resumer verifies the signature against a pinned public key before
an approval counts (docs/adr/0014-signed-decisions-and-writers.md).  The signed message::

    "SGCD3" || F(key_id) || F(event_type) || F(saga_id) || F(int64_be(ref_seq))
            || F(request_hash) || F(journal)
            || F(payload_sha256) || F(principal) || F(int64_be(decided_at_us))
            || F(policy_version) || F(outcome) || F(phase) || F(signatures_required)

with ``F`` the length-prefixed field of docs/adr/0002-hash-chain.md (``FF FF FF FF`` for an
absent value).  ``request_hash`` is the hash of the entry decided on (the request, which chains
to the whole saga before it) and ``journal`` the journal's name: a decision binds what was
shown, on the journal it was made on (docs/adr/0025-trust-model.md).  ``signatures_required``
is, on an ``APPROVED``, the signatures the service decided the request needs (the tool's
declaration, raised by its route's "two of finance"): a resumer that does not know the route
still waits for that many.  The signature travels in the entry's ``decision_signature``
attribute as ``SGCD3:<key_id>:<128 hex>``; the attribute is hashed into the chain like any
other.  Decisions of earlier releases still verify as the service's (the archive attributes
them): ``SGCD2`` (no count) also counts at a resume, ``SGCD1`` (without the two bound fields)
does not.

``cryptography`` is imported only when a key is loaded or a signature checked.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sagacity.chain._form import framed_field as _field
from sagacity.chain._form import framed_int as _int
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft
from sagacity.errors import SigningKeyError
from sagacity.signing._ed25519 import KeyHolder, PinnedKeys, signature_valid, write_private_key

if TYPE_CHECKING:
    pass

DECISION_MAGIC = b"SGCD3"
"""Leading bytes of the signed message; the version of its form."""
UNCOUNTED_MAGIC = b"SGCD2"
"""The form of the previous release: bound to the request and the journal, without the count
of signatures the service required (verifies and counts; says nothing of the count)."""
LEGACY_MAGIC = b"SGCD1"
"""The form of earlier releases: no request hash, no journal (verifies, binds nothing)."""
_MAGICS = {m.decode(): m for m in (DECISION_MAGIC, UNCOUNTED_MAGIC, LEGACY_MAGIC)}
_BOUND_FORMS = (DECISION_MAGIC.decode() + ":", UNCOUNTED_MAGIC.decode() + ":")
PUBLIC_KEY_ENV = "SAGACITY_APPROVALS_PUBLIC_KEY"
"""The pinned public key(s) every resumer and the archive verify decisions against."""

DECISION_EVENTS: frozenset[str] = frozenset({"APPROVED", "REJECTED", "EXPIRED", "SUSPECT_SETTLED"})
"""Event types the approvals service signs when it journals them.

A new kind of decision is signed by adding its event type here, and to
:data:`AUTHORISING_EVENTS` when it lets anything proceed; the journaling code passes its draft
through :meth:`DecisionSigner.sign`.  Its outcome, if any, goes in the ``outcome`` attribute
and the step's phase in ``phase`` (both covered), as ``SUSPECT_SETTLED`` does.
"""
AUTHORISING_EVENTS: frozenset[str] = frozenset({"APPROVED", "SUSPECT_SETTLED"})
"""Decisions that let something proceed: only a verified signature makes them count.

The others only stop work (a request rejected or lapsed): an unsigned one is accepted, since
agents and the compensation service journal ``EXPIRED`` themselves, and forging one can only
stop a tool, never run it.  A signed one must still verify.
"""


class Reason:
    """Why a decision's signature does not verify (also the archive's quarantine reasons)."""

    UNSIGNED = "unsigned_decision"
    MALFORMED = "malformed_decision_signature"
    UNKNOWN_KEY = "unknown_decision_key"
    BAD_SIGNATURE = "bad_decision_signature"
    UNBOUND = "unbound_decision"
    """Signed in the form of an earlier release: it names neither the request nor the journal."""
    OTHER_JOURNAL = "decision_for_another_journal"
    OTHER_REQUEST = "decision_for_another_request"
    BEFORE_REQUEST = "decision_before_request"


def decision_message(
    *,
    key_id: str,
    event_type: str,
    saga_id: str,
    ref_seq: int,
    payload_sha256: str | None,
    principal: str | None,
    decided_at_us: int,
    policy_version: str | None,
    outcome: str | None,
    phase: str | None = None,
    request_hash: str | None = None,
    journal: str | None = None,
    signatures_required: str | None = None,
    magic: bytes = DECISION_MAGIC,
) -> bytes:
    """The exact bytes a decision signature covers (``SGCD3``; ``magic=UNCOUNTED_MAGIC``: the
    previous form, without ``signatures_required``; ``magic=LEGACY_MAGIC``: the earlier form,
    without ``request_hash`` and ``journal`` either)."""
    bound = (_field(request_hash), _field(journal)) if magic != LEGACY_MAGIC else ()
    counted = (_field(signatures_required),) if magic == DECISION_MAGIC else ()
    return b"".join(
        (
            magic,
            _field(key_id),
            _field(event_type),
            _field(saga_id),
            _int(ref_seq),
            *bound,
            _field(payload_sha256),
            _field(principal),
            _int(decided_at_us),
            _field(policy_version),
            _field(outcome),
            _field(phase),
            *counted,
        )
    )


def _message_of(entry: EntryDraft, key_id: str, magic: bytes = DECISION_MAGIC) -> bytes | None:
    """The message for ``entry``, or ``None`` when it has no usable ``ref_seq``."""
    attributes = entry.attributes
    try:
        ref_seq = int(attributes.get(attr.REF_SEQ, ""))
        return decision_message(
            magic=magic,
            request_hash=attributes.get(attr.REQUEST_HASH),
            journal=attributes.get(attr.JOURNAL),
            key_id=key_id,
            event_type=entry.event_type.value,
            saga_id=entry.saga_id,
            ref_seq=ref_seq,
            payload_sha256=attributes.get(attr.PAYLOAD_SHA256),
            principal=entry.actor,
            decided_at_us=entry.recorded_at_us,
            policy_version=attributes.get(attr.POLICY_VERSION),
            outcome=attributes.get(attr.OUTCOME),
            phase=attributes.get(attr.PHASE),
            signatures_required=attributes.get(attr.SIGNATURES_REQUIRED),
        )
    except (ValueError, struct.error):
        return None


def is_decision(entry: EntryDraft) -> bool:
    """Whether ``entry`` is a decision the approvals service signs."""
    return entry.event_type.value in DECISION_EVENTS


class DecisionSigner(KeyHolder):
    """Signs decisions with the approvals service's Ed25519 private key."""

    @classmethod
    def ephemeral(cls) -> DecisionSigner:
        """A new key held only in memory (its decisions verify only while it is pinned)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    def signature(self, entry: EntryDraft) -> str:
        """The ``decision_signature`` attribute value for ``entry``.

        Raises:
            SigningKeyError: ``entry`` is not a decision or has no integer ``ref_seq``.
        """
        if not is_decision(entry):
            raise SigningKeyError(f"{entry.event_type.value} is not a signed decision type")
        message = _message_of(entry, self.key_id)
        if message is None:
            raise SigningKeyError("a decision must refer to its request (integer ref_seq)")
        return f"{DECISION_MAGIC.decode()}:{self.key_id}:{self._key.sign(message).hex()}"

    def sign(self, draft: EntryDraft) -> EntryDraft:
        """``draft`` with its ``decision_signature`` attribute (replacing any given)."""
        attributes = {k: v for k, v in draft.attributes.items() if k != attr.DECISION_SIGNATURE}
        unsigned = replace(draft, attributes=attributes)
        return replace(
            unsigned,
            attributes={**attributes, attr.DECISION_SIGNATURE: self.signature(unsigned)},
        )


def generate_key(path: str | Path) -> DecisionSigner:
    """Write a new Ed25519 private key to ``path`` (mode 0600, refusing to overwrite).

    Raises:
        SigningKeyError: the file exists or cannot be written.
    """
    return DecisionSigner(write_private_key(path))


class DecisionVerifier(PinnedKeys):
    """Checks decision signatures against pinned public keys.

    Args:
        public_keys: raw 32-byte Ed25519 public keys (several during a key rotation).
    """

    name = "a decision verifier"
    what = "approvals public key"
    setting = PUBLIC_KEY_ENV

    def check(self, entry: EntryDraft) -> str | None:
        """``None`` when ``entry``'s decision signature verifies, else a :class:`Reason`."""
        raw = entry.attributes.get(attr.DECISION_SIGNATURE)
        if raw is None:
            return Reason.UNSIGNED
        parts = raw.split(":")
        if len(parts) != 3 or parts[0] not in _MAGICS or len(parts[2]) != 128:
            return Reason.MALFORMED
        form, key_id, signature_hex = parts
        public = self._keys.get(key_id)
        if public is None:
            return Reason.UNKNOWN_KEY
        message = _message_of(entry, key_id, _MAGICS[form])
        try:
            signature = bytes.fromhex(signature_hex)
        except ValueError:
            return Reason.MALFORMED
        if message is None:
            return Reason.MALFORMED
        return None if _valid(public, signature, message) else Reason.BAD_SIGNATURE

    def bound(
        self,
        entry: EntryDraft,
        *,
        journal: str,
        request_hash: str | None = None,
        after_us: int | None = None,
    ) -> str | None:
        """As :meth:`check`, and the decision is in the bound form naming this ``journal``
        and (given them) the hash of the entry it decides on and a time not before
        ``after_us`` (that entry's): what a resume requires of a decision that lets something
        proceed.  ``None`` when it does."""
        reason = self.check(entry)
        if reason is not None:
            return reason
        attributes = entry.attributes
        if not (attributes.get(attr.DECISION_SIGNATURE) or "").startswith(_BOUND_FORMS):
            return Reason.UNBOUND
        if attributes.get(attr.JOURNAL) != journal:
            return Reason.OTHER_JOURNAL
        if request_hash is not None and attributes.get(attr.REQUEST_HASH) != request_hash:
            return Reason.OTHER_REQUEST
        if after_us is not None and entry.recorded_at_us < after_us:
            return Reason.BEFORE_REQUEST
        return None

    def required(self, entry: EntryDraft) -> str | None:
        """As :meth:`check` for a decision that must be signed (an authorising one) or that
        carries a signature; ``None`` for an unsigned decision that only stops work, and for
        anything that is not a decision."""
        kind = entry.event_type.value
        if kind not in DECISION_EVENTS:
            return None
        if kind not in AUTHORISING_EVENTS and attr.DECISION_SIGNATURE not in entry.attributes:
            return None
        return self.check(entry)


def counts_required(entry: EntryDraft) -> bool:
    """Whether ``entry``'s signature form covers its ``signatures_required`` attribute (what a
    verified signature then vouches for)."""
    return (entry.attributes.get(attr.DECISION_SIGNATURE) or "").startswith(
        DECISION_MAGIC.decode() + ":"
    )


def _valid(public_raw: bytes, signature: bytes, message: bytes) -> bool:
    return signature_valid(public_raw, signature, message)


def verifier_from_env(environ: Mapping[str, str] | None = None) -> DecisionVerifier | None:
    """The verifier pinned by ``SAGACITY_APPROVALS_PUBLIC_KEY`` (``None`` when unset).

    Raises:
        ConfigurationError: the variable is set but does not hold a public key.
    """
    env = os.environ if environ is None else environ
    text = env.get(PUBLIC_KEY_ENV, "").strip()
    return DecisionVerifier.parse(text) if text else None
