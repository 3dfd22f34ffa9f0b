"""Operator signatures: what only a person holding the operator key may put on a chain.

Every agent can produce to the journal topic, so two events are acted on only when an operator
signed them (docs/adr/0027-operator-signatures.md):

* a ``COMPENSATION_REQUESTED`` after the saga ended (``sagacity saga compensate``): the
  compensation service undoes finished work only on the operator's word;
* an ``ERASED`` (``sagacity erase``): the erasure is the operator's, and a forged one neither
  stops a real erasure nor counts as one.

The signature travels in the entry's ``operator_signature`` attribute as
``SGCO1:<key_id>:<128 hex>`` over::

    "SGCO1" || F(key_id) || F(event_type) || F(saga_id) || F(int64_be(seq))
            || F(prev_hash) || F(actor) || F(int64_be(recorded_at_us)) || F(reason)
            || F(journal)

with ``F`` the length-prefixed field of docs/adr/0002-hash-chain.md (``FF FF FF FF`` for an
absent value), ``reason`` the entry's ``reason`` attribute and ``journal`` its ``journal``
attribute (the journal's identity, docs/adr/0025-trust-model.md).  ``prev_hash`` is the hash
of the saga's entry the signed one extends, so a signature holds at one place of one chain of
one journal only.
``cryptography`` is imported only when a key is loaded or a signature checked.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sagacity.chain._form import framed_field as _field
from sagacity.chain._form import framed_int as _int
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    SigningKeyError,
    TailMovedError,
    UnknownSagaError,
)
from sagacity.journal import ConditionalJournal
from sagacity.signing._ed25519 import KeyHolder, PinnedKeys, signature_valid, write_private_key

if TYPE_CHECKING:
    pass

OPERATOR_MAGIC = b"SGCO1"
"""Leading bytes of the signed message; the version of its form."""
PUBLIC_KEY_ENV = "SAGACITY_OPERATOR_PUBLIC_KEY"
"""The pinned operator public key(s): hex or key files, comma-separated (a rotation)."""
SIGNING_KEY_ENV = "SAGACITY_OPERATOR_SIGNING_KEY"
"""The operator's private key file, read by the commands that sign (never by a service)."""

OPERATOR_EVENTS: frozenset[EventType] = frozenset(
    {EventType.COMPENSATION_REQUESTED, EventType.ERASED, EventType.DEADLINE_EXTENDED}
)
"""The event types an operator signs."""


class Reason:
    """Why an operator signature does not count (the compensation service's dead-letter
    reasons, and what readers report)."""

    UNSIGNED = "unsigned_operator_event"
    MALFORMED = "malformed_operator_signature"
    UNKNOWN_KEY = "unknown_operator_key"
    BAD_SIGNATURE = "bad_operator_signature"
    NOT_PINNED = "no_operator_key_pinned"
    OTHER_JOURNAL = "operator_event_for_another_journal"


class OperatorDraft(Protocol):
    """What an operator signature covers of an event (an :class:`EntryDraft`, or an event
    read back: a :class:`JournalEntry`, an archived row)."""

    @property
    def saga_id(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def actor(self) -> str | None: ...
    @property
    def recorded_at_us(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, str]: ...


class OperatorEvent(OperatorDraft, Protocol):
    """An event at its place in a chain: what :meth:`OperatorVerifier.check` reads."""

    @property
    def seq(self) -> int: ...
    @property
    def prev_hash(self) -> str: ...


def operator_message(
    *,
    key_id: str,
    event_type: str,
    saga_id: str,
    seq: int,
    prev_hash: str,
    actor: str | None,
    recorded_at_us: int,
    reason: str | None,
    journal: str | None = None,
) -> bytes:
    """The exact bytes an operator signature covers (``SGCO1``).

    Raises:
        struct.error: ``seq`` or ``recorded_at_us`` does not fit int64.
    """
    return b"".join(
        (
            OPERATOR_MAGIC,
            _field(key_id),
            _field(event_type),
            _field(saga_id),
            _int(seq),
            _field(prev_hash),
            _field(actor),
            _int(recorded_at_us),
            _field(reason),
            _field(journal),
        )
    )


def _message_of(draft: OperatorDraft, key_id: str, *, seq: int, prev_hash: str) -> bytes | None:
    try:
        return operator_message(
            key_id=key_id,
            event_type=str(draft.event_type),
            saga_id=draft.saga_id,
            seq=seq,
            prev_hash=prev_hash,
            actor=draft.actor,
            recorded_at_us=draft.recorded_at_us,
            reason=draft.attributes.get(attr.REASON),
            journal=draft.attributes.get(attr.JOURNAL),
        )
    except struct.error:
        return None


class OperatorSigner(KeyHolder):
    """Signs operator events with the operator's Ed25519 private key."""

    def sign(self, draft: EntryDraft, *, seq: int, prev_hash: str) -> EntryDraft:
        """``draft`` with its ``operator_signature`` attribute, for the place ``seq`` after
        the entry whose hash is ``prev_hash`` (the draft's time must be set).

        Raises:
            SigningKeyError: not an operator event type, or ``seq`` / the time out of range.
        """
        if draft.event_type not in OPERATOR_EVENTS:
            raise SigningKeyError(f"{draft.event_type.value} is not an operator event type")
        attributes = {k: v for k, v in draft.attributes.items() if k != attr.OPERATOR_SIGNATURE}
        unsigned = replace(draft, attributes=attributes)
        message = _message_of(unsigned, self.key_id, seq=seq, prev_hash=prev_hash)
        if message is None:
            raise SigningKeyError("an operator event's seq and time must fit int64")
        signature = f"SGCO1:{self.key_id}:{self._key.sign(message).hex()}"
        return replace(unsigned, attributes={**attributes, attr.OPERATOR_SIGNATURE: signature})


def generate_key(path: str | Path) -> OperatorSigner:
    """Write a new operator key to ``path`` (PEM, mode 0600, refusing to overwrite).

    Raises:
        SigningKeyError: the file exists or cannot be written.
    """
    return OperatorSigner(write_private_key(path))


class OperatorVerifier(PinnedKeys):
    """Checks operator signatures against pinned public keys.

    Args:
        public_keys: raw 32-byte Ed25519 public keys (several during a key rotation).

    Raises:
        ConfigurationError: no key.
    """

    name = "an operator verifier"
    what = "operator public key"
    setting = PUBLIC_KEY_ENV

    def check(self, entry: OperatorEvent, *, journal: str | None = None) -> str | None:
        """``None`` when ``entry`` carries an operator signature that verifies at its place
        in its chain (and, given ``journal``, names that journal), else a :class:`Reason`."""
        why = signature_form(entry.attributes)
        if why is not None:
            return why
        _, key_id, signature_hex = entry.attributes[attr.OPERATOR_SIGNATURE].split(":")
        public = self._keys.get(key_id)
        if public is None:
            return Reason.UNKNOWN_KEY
        if entry.event_type not in OPERATOR_EVENTS:
            return Reason.BAD_SIGNATURE
        message = _message_of(entry, key_id, seq=entry.seq, prev_hash=entry.prev_hash)
        if message is None:
            return Reason.MALFORMED
        if not signature_valid(public, signature_hex, message):
            return Reason.BAD_SIGNATURE
        if journal is not None and entry.attributes.get(attr.JOURNAL) != journal:
            return Reason.OTHER_JOURNAL
        return None


def signature_form(attributes: Mapping[str, str]) -> str | None:
    """``None`` when ``attributes`` carry an ``operator_signature`` of the ``SGCO1`` form (a
    key id and 64 bytes of hex), else why not (:attr:`Reason.UNSIGNED`,
    :attr:`Reason.MALFORMED`): what can be told of a signature without a key to check it."""
    raw = attributes.get(attr.OPERATOR_SIGNATURE)
    if raw is None:
        return Reason.UNSIGNED
    parts = raw.split(":")
    if len(parts) != 3 or parts[0] != "SGCO1" or not parts[1] or len(parts[2]) != 128:
        return Reason.MALFORMED
    try:
        bytes.fromhex(parts[2])
    except ValueError:
        return Reason.MALFORMED
    return None


def operator_reason(
    entry: OperatorEvent, verifier: OperatorVerifier | None, *, journal: str | None = None
) -> str | None:
    """``None`` when ``entry`` is an operator's (signed, verifying against ``verifier``, on
    ``journal`` when given), else why not (:class:`Reason`; ``no_operator_key_pinned`` without
    a verifier)."""
    if verifier is None:
        return Reason.NOT_PINNED
    return verifier.check(entry, journal=journal)


def erasure_counts(
    entry: OperatorEvent, verifier: OperatorVerifier | None, *, journal: str | None = None
) -> bool:
    """Whether ``entry`` is an ``ERASED`` that counts: signed by a pinned operator key (for
    ``journal``, when the reader knows its own).

    Any writer can append an ``ERASED``; one that does not count names nobody as the eraser
    and does not stop a real erasure.  What acts on an erasure calls this (``erase``, the
    compensation service): without a pinned key none counts.  The auditors' tools count
    through :func:`sagacity.privacy._withheld.erasure_verdict`, which says when no key was pinned.
    """
    return (
        entry.event_type == EventType.ERASED
        and operator_reason(entry, verifier, journal=journal) is None
    )


def verifier_from_env(environ: Mapping[str, str] | None = None) -> OperatorVerifier | None:
    """The verifier pinned by ``SAGACITY_OPERATOR_PUBLIC_KEY`` (``None`` when unset).

    Raises:
        ConfigurationError: the variable is set but does not hold a public key.
    """
    env = os.environ if environ is None else environ
    text = env.get(PUBLIC_KEY_ENV, "").strip()
    return OperatorVerifier.parse(text) if text else None


def verifier_with(
    signer: OperatorSigner | None, pinned: OperatorVerifier | None
) -> OperatorVerifier | None:
    """The pinned keys plus ``signer``'s own (a command that signs trusts its own key)."""
    keys = list(pinned.public_keys) if pinned is not None else []
    if signer is not None:
        keys.append(signer.public_raw)
    return OperatorVerifier(keys) if keys else None


_APPEND_ATTEMPTS = 5


def append_signed(
    journal: ConditionalJournal,
    draft: EntryDraft,
    signer: OperatorSigner,
    *,
    check: Callable[[Sequence[JournalEntry]], None] | None = None,
) -> JournalEntry:
    """Append ``draft`` signed for the saga's tail as read now, with a compare-and-append; a
    chain another writer extended meanwhile is read again, checked again and signed again (a
    few times).

    Args:
        check: raises when the chain as read may not take the event (called on every read).

    Raises:
        TailMovedError: the chain kept moving (run the command again).
        UnknownSagaError: the saga has no entries.
        JournalUnavailableError: the topic could not be read or written.
    """
    identity = getattr(journal, "identity", None)
    if isinstance(identity, str) and identity:
        # The journal it is signed for (a copy into another journal does not count there).
        draft = replace(draft, attributes={**draft.attributes, attr.JOURNAL: identity})
    for attempt in range(_APPEND_ATTEMPTS):
        entries = journal.entries(draft.saga_id)
        if not entries:
            raise UnknownSagaError(f"saga {draft.saga_id!r} has no entries", saga_id=draft.saga_id)
        if check is not None:
            check(entries)
        tail = entries[-1]
        signed = signer.sign(draft, seq=tail.seq + 1, prev_hash=tail.hash)
        try:
            return journal.append_after(signed, after_seq=tail.seq, durable=True)
        except TailMovedError:
            if attempt == _APPEND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
