"""The journal's hot path: link a draft into its chain and encode it, in one pass.

:func:`link_encoded` gives what :func:`sagacity.chain.link` then :func:`._avro.encode_entry`
give, byte for byte, encoding each text field to UTF-8 once for both the canonical bytes that
are hashed and the Avro body that is published; :func:`link_encoded_sealed` does the same for
a sealed saga.  The compiled module (``native/``, docs/adr/0013-compiled-hot-path.md) does the
work where it is installed; whatever it does not take falls back to the Python paths here,
which raise the documented errors.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping
from functools import cache

from sagacity._native import native
from sagacity.chain import canonical_bytes, canonical_layout, committing, link
from sagacity.entries._events import (
    DATA_ATTRIBUTES,
    EntryDraft,
    JournalEntry,
    with_attribute,
    with_attribute_items,
)
from sagacity.errors import SerializationError
from sagacity.schemas._avro import (
    LENGTHS,
    MAGIC,
    SCHEMA_VERSION,
    avro_bytes,
    avro_long,
    avro_optional_bytes,
    avro_string,
    current_schema,
    direct_encoding,
    encode_entry,
    form_tail,
)
from sagacity.schemas._sealed import FieldSealer, encode_sealed

_NO_MAP: dict[str, str] = {}
"""An empty map for the compiled hot path's form-1 calls (it copies it, never changes it)."""
_PLACED = JournalEntry.placed
"""The entry's constructor the compiled link step calls (bound once, not looked up per event)."""


def _load_native() -> Callable[..., tuple[str, bytes] | None] | None:
    """The compiled hot path (``native/``, package ``sagacity-native``) when it is installed
    and not turned off with ``SAGACITY_NATIVE=0``; ``None`` otherwise."""
    function: Callable[..., tuple[str, bytes] | None] | None = native("link_encode")
    return function


_native_link_encode = _load_native()
_native_link_entry: Callable[..., tuple[JournalEntry, bytes] | None] | None = native("link_entry")
_native_seal_link_entry: Callable[..., tuple[JournalEntry, bytes] | None] | None = native(
    "seal_link_entry"
)
NATIVE = _native_link_encode is not None
"""Whether :func:`link_encoded` runs compiled (docs/adr/0013-compiled-hot-path.md)."""


@cache
def _native_header() -> bytes:
    """What precedes the Avro fields the compiled path writes: marker, fingerprint, version."""
    return MAGIC + current_schema().fingerprint + LENGTHS[SCHEMA_VERSION]


def link_encoded(
    draft: EntryDraft,
    *,
    seq: int,
    prev_hash: str,
    attribute: tuple[str, str] | None = None,
) -> tuple[JournalEntry, bytes]:
    """:func:`sagacity.chain.link` then :func:`encode_entry`, in one pass.

    The journal's hot path: each text field is encoded to UTF-8 once and used for both the
    canonical bytes that are hashed and the Avro body that is published.  The results are
    those of the two functions, byte for byte (tests compare them on generated entries); with
    a schema whose layout differs the two functions run as they are.  When the compiled hot
    path is installed (:data:`NATIVE`) it does the linking and encoding; anything it does not
    take falls back to the Python path, which raises the errors below.

    ``attribute``: a ``(key, value)`` the writer adds to the draft's attributes (its
    ``writer``): the entry is ``with_attribute(draft, key, value)`` linked, without a copy of
    the draft made for it.

    Raises:
        SerializationError: ``seq`` is not an int >= 1, ``prev_hash`` is not 32 bytes hex, a
            field does not fit the canonical form or the schema (a time beyond 64 bits), or
            ``attribute`` is not valid text.
    """
    if not direct_encoding():
        if attribute is not None:
            draft = with_attribute(draft, *attribute)
        entry = link(draft, seq=seq, prev_hash=prev_hash)
        return entry, encode_entry(entry)
    linked = _native_link_entry
    if linked is not None:
        # The compiled link step, entry included (form 1); what it hands back (None) is judged
        # below, where the errors are raised.
        try:
            made = linked(_native_header(), prev_hash, seq, draft, _PLACED, attribute)
        except (OverflowError, TypeError, ValueError):
            made = None
        if made is not None:
            return made
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise SerializationError("seq must be an int >= 1")
    try:
        prev = bytes.fromhex(prev_hash)
    except (ValueError, TypeError) as exc:
        raise SerializationError(f"previous hash is not hex: {prev_hash!r}") from exc
    if len(prev) != 32:
        raise SerializationError("previous hash must be 32 bytes")
    attributes = draft.attributes
    if attribute is not None:
        attributes = with_attribute_items(attributes, *attribute)
    if _native_link_encode is not None:
        made = _link_encode_compiled(draft, seq, prev_hash, prev, attributes, attribute)
        if made is not None:
            return made
    if attribute is not None:
        draft = with_attribute(draft, *attribute)
    return _link_encoded_python(draft, seq=seq, prev_hash=prev_hash, prev=prev)


def _link_encode_compiled(
    draft: EntryDraft,
    seq: int,
    prev_hash: str,
    prev: bytes,
    attributes: Mapping[str, str],
    attribute: tuple[str, str] | None,
) -> tuple[JournalEntry, bytes] | None:
    """The compiled ``link_encode`` of ``draft`` with ``attributes`` (its own, or with the
    writer's ``attribute`` merged in); ``None`` for what it does not take (the Python path
    says what is wrong)."""
    compiled = _native_link_encode
    assert compiled is not None
    try:
        out = compiled(
            _native_header(),
            prev,
            prev_hash,
            seq,
            draft.saga_id,
            # The type itself: a str whose text is its name (``.value`` is a Python-level
            # property of an enum, read once per event here otherwise).
            draft.event_type,
            draft.tool,
            draft.payload,
            draft.result,
            draft.error,
            draft.actor,
            draft.recorded_at_us,
            attributes,
            draft.form,
            # The compiled function takes dicts; a draft's maps are read-only views (and
            # empty in form 1, which refuses them).
            _NO_MAP if draft.form == 1 else dict(draft.commitments),
            _NO_MAP if draft.form == 1 else dict(draft.salts),
        )
    except (OverflowError, TypeError, ValueError):
        return None
    if out is None:
        return None
    digest, value = out
    entry = JournalEntry.placed(
        draft,
        seq=seq,
        prev_hash=prev_hash,
        hash=digest,
        attributes=None if attribute is None else attributes,
    )
    return entry, value


def link_encoded_sealed(
    draft: EntryDraft,
    *,
    seq: int,
    prev_hash: str,
    keys: FieldSealer,
    attribute: tuple[str, str] | None = None,
) -> tuple[JournalEntry, bytes]:
    """A form-1 ``draft`` committed to (fresh salts), linked in form 2 and encoded with its
    openings sealed under the saga's data key, in one pass: the sealed journal's hot path.

    What ``link_encoded(committing(draft), ...)`` then :func:`encode_sealed` give, for the
    salts and nonces drawn (tests open it with the key service and compare); the compiled
    module does it where installed, anything it does not take falls back to those functions,
    which raise the errors below.  ``attribute``: as :func:`link_encoded`.

    Raises:
        SerializationError: as :func:`link_encoded`, or ``draft`` is already in form 2.
        EncryptionError / PersistenceError: from ``keys`` (a saga erased, the store down).
    """
    data = (
        draft.payload is not None
        or draft.result is not None
        or draft.error is not None
        or not DATA_ATTRIBUTES.isdisjoint(draft.attributes)
    )
    sealed = _native_seal_link_entry
    # Nothing to seal (an opening, an end, an erasure's record): no key is asked for, so an
    # erased saga can still be appended to.
    if sealed is not None and data and draft.form == 1 and direct_encoding():
        # The compiled sealer, entry included; what it hands back (None) is judged below,
        # where the errors are raised.
        try:
            made = sealed(
                _native_header(),
                prev_hash,
                seq,
                draft,
                _PLACED,
                keys.material(draft.saga_id),
                attribute,
            )
        except (OverflowError, TypeError, ValueError):
            made = None
        if made is not None:
            return made
    if attribute is not None:
        draft = with_attribute(draft, *attribute)
    entry, _ = link_encoded(committing(draft), seq=seq, prev_hash=prev_hash)
    return entry, encode_sealed(entry, keys)


def _link_encoded_python(
    draft: EntryDraft, *, seq: int, prev_hash: str, prev: bytes
) -> tuple[JournalEntry, bytes]:
    """:func:`link_encoded` in Python, for a valid ``seq`` and ``prev`` (``prev_hash``'s
    bytes)."""
    saga = draft.saga_id.encode("utf-8")
    kind = draft.event_type.value.encode("utf-8")
    tool, payload, result, error, actor = (
        None if v is None else v.encode("utf-8")
        for v in (draft.tool, draft.payload, draft.result, draft.error, draft.actor)
    )
    recorded = draft.recorded_at_us
    attributes = draft.attributes
    if attributes:
        # A draft's attributes are sorted by key (as UTF-8 bytes) when it is made.
        items = [(k.encode("utf-8"), v.encode("utf-8")) for k, v in attributes.items()]
        avro_attributes = (
            avro_long(len(items))
            + b"".join(avro_bytes(k) + avro_bytes(v) for k, v in items)
            + LENGTHS[0]
        )
    else:
        items = None
        avro_attributes = LENGTHS[0]
    # prev || C(entry), written by the chain's one Python writer (docs/adr/0002-hash-chain.md).
    if draft.form == 1:
        hashed = canonical_layout(
            saga, seq, kind, tool, payload, result, error, actor, recorded, items, prefix=prev
        )
    else:
        hashed = prev + canonical_bytes(draft, seq=seq)
    try:
        time_field = avro_long(recorded)
    except (struct.error, OverflowError) as exc:
        raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    digest = hashlib.sha256(hashed).hexdigest()
    entry = JournalEntry.placed(draft, seq=seq, prev_hash=prev_hash, hash=digest)
    value = b"".join(
        (
            MAGIC,
            current_schema().fingerprint,
            LENGTHS[SCHEMA_VERSION],
            avro_bytes(saga),
            avro_long(seq),
            avro_bytes(kind),
            avro_optional_bytes(tool),
            avro_optional_bytes(payload),
            avro_optional_bytes(result),
            avro_optional_bytes(error),
            avro_optional_bytes(actor),
            time_field,
            avro_attributes,
            avro_string(prev_hash),
            LENGTHS[64],
            digest.encode(),
            form_tail(draft),
        )
    )
    return entry, value
