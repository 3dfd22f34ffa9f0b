"""The hash chain's canonical form: its layout and text rules, commitments, linking.

Specified in docs/adr/0002-hash-chain.md precisely enough to write a verifier in another
language; ``tests/vectors/chain-v1.json`` holds vectors.  This module has no dependencies beyond
the standard library so that auditors' tools can reuse it.  The walk of a stored chain is
:mod:`sagacity.chain._walk`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import struct
from collections.abc import Callable, Mapping, Sequence

from sagacity.entries._events import DATA_ATTRIBUTES, EntryDraft, JournalEntry
from sagacity.errors import SerializationError

CANONICAL_MAGIC = b"SGC1"
"""Leading bytes of every canonical form; the version of the form itself."""
CANONICAL_MAGIC_V2 = b"SGC2"
"""Form 2: the data fields committed to, not hashed in clear (docs/adr/0019-erasure.md §1)."""
COMMITMENT_MAGIC = b"SGK1"
"""Leading bytes of every commitment's preimage."""
SALT_BYTES = 32

_NULL = b"\xff\xff\xff\xff"
_U32 = struct.Struct(">I").pack
_INT_FIELD = struct.Struct(">Iq").pack  # the length (8) and the big-endian int64


_EMPTY_ATTRIBUTES = _U32(0)


def framed(data: bytes) -> bytes:
    """``F(data)`` of docs/adr/0002-hash-chain.md: a big-endian 32-bit length, then the bytes;
    the framing of every preimage here and of the envelope's and redaction's (ADR 0019)."""
    return _U32(len(data)) + data


def framed_field(value: str | bytes | None) -> bytes:
    """A signed message's field (decisions, operator events, grants, writers): text as its
    UTF-8 bytes, :func:`framed`; ``FF FF FF FF`` for none."""
    if value is None:
        return _NULL
    return framed(value.encode("utf-8") if isinstance(value, str) else value)


def framed_int(value: int | None) -> bytes:
    """A signed message's integer field: its big-endian int64, :func:`framed`; ``FF FF FF FF``
    for none."""
    return _NULL if value is None else _INT_FIELD(8, value)


def canonical_bytes(entry: EntryDraft, *, seq: int) -> bytes:
    """The exact bytes hashed for an entry at ``seq`` (docs/adr/0002-hash-chain.md; form 2:
    docs/adr/0019-erasure.md).

    Raises:
        SerializationError: ``seq`` does not fit int64, a field is too large for the form, or
            (form 2) a data field's opening is incomplete or does not match its commitment.
    """
    if entry.form != 1:
        return canonical_bytes_v2_of(
            entry.saga_id,
            seq,
            entry.event_type.value,
            entry.tool,
            entry.payload,
            entry.result,
            entry.error,
            entry.actor,
            entry.recorded_at_us,
            entry.attributes,
            commitments=entry.commitments,
            salts=entry.salts,
        )
    attributes = entry.attributes
    tool, payload, result, error, actor = (
        None if v is None else v.encode("utf-8")
        for v in (entry.tool, entry.payload, entry.result, entry.error, entry.actor)
    )
    return canonical_layout(
        entry.saga_id.encode("utf-8"),
        seq,
        entry.event_type.value.encode("utf-8"),
        tool,
        payload,
        result,
        error,
        actor,
        entry.recorded_at_us,
        # A draft's attributes are sorted by key when it is made (code points sort as bytes).
        [(k.encode("utf-8"), v.encode("utf-8")) for k, v in attributes.items()]
        if attributes
        else None,
    )


def compute_hash(prev_hash: str, entry: EntryDraft, *, seq: int) -> str:
    """``SHA-256(bytes.fromhex(prev_hash) || canonical_bytes(entry, seq))`` as lowercase hex."""
    try:
        prev = bytes.fromhex(prev_hash)
    except ValueError as exc:
        raise SerializationError(f"previous hash is not hex: {prev_hash!r}") from exc
    if len(prev) != 32:
        raise SerializationError("previous hash must be 32 bytes")
    return hashlib.sha256(prev + canonical_bytes(entry, seq=seq)).hexdigest()


def link(draft: EntryDraft, *, seq: int, prev_hash: str) -> JournalEntry:
    """Place ``draft`` at ``seq`` after an entry whose hash is ``prev_hash``.

    Raises:
        SerializationError: ``seq`` is not an int >= 1, or ``prev_hash`` is not 32 bytes hex.
    """
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise SerializationError("seq must be an int >= 1")
    digest = compute_hash(prev_hash, draft, seq=seq)
    # ``draft`` was validated when made (it is frozen): its fields are not checked again.
    return JournalEntry.placed(draft, seq=seq, prev_hash=prev_hash, hash=digest)


def payload_sha256(payload: str) -> str:
    """The approval binding: SHA-256 over the payload's UTF-8 bytes, lowercase hex."""
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def canonical_bytes_of(
    saga_id: str,
    seq: int,
    event_type: str,
    tool: str | None,
    payload: str | None,
    result: str | None,
    error: str | None,
    actor: str | None,
    recorded_at_us: int,
    attributes: Mapping[str, str] | None,
) -> bytes:
    """:func:`canonical_bytes` from plain field values, byte for byte the same form.

    For readers that hold an entry's columns (an archive row, a decoded Avro record) and would
    otherwise build a validated :class:`JournalEntry` only to hash it.  ``event_type`` is the
    type's name as written.  It refuses every input ``tests/vectors/negative-v1.json`` lists,
    as building the entry would.

    Raises:
        SerializationError: ``seq`` is not an int from 1, ``recorded_at_us`` not an int, an int
            does not fit int64, ``saga_id`` or ``event_type`` is empty, a text holds U+0000, or
            a field is too large for the form.
        UnicodeEncodeError / AttributeError: a value is not text (a lone surrogate, a number).
    """
    if type(seq) is not int and (not isinstance(seq, int) or isinstance(seq, bool)):
        raise SerializationError("seq must be an int >= 1")
    if seq < 1:
        raise SerializationError("seq must be an int >= 1")
    if type(recorded_at_us) is not int and (
        not isinstance(recorded_at_us, int) or isinstance(recorded_at_us, bool)
    ):
        raise SerializationError("recorded_at_us must be an int (microseconds)")
    if not saga_id or not event_type:
        raise SerializationError("saga_id and event_type must be non-empty text")
    # The text rule; None formats as "None", which holds no U+0000.
    if "\x00" in f"{saga_id}{event_type}{tool}{payload}{result}{error}{actor}":
        raise SerializationError("a text field contains U+0000")
    items = None
    if attributes:
        items = sorted([(k.encode("utf-8"), v.encode("utf-8")) for k, v in attributes.items()])
        # Every key and value encoded, so each is text: joined, one scan finds a U+0000.
        if "\x00" in "".join(attributes) or "\x00" in "".join(attributes.values()):
            raise SerializationError("an attribute contains U+0000")
    return canonical_layout(
        saga_id.encode("utf-8"),
        seq,
        event_type.encode("utf-8"),
        None if tool is None else tool.encode("utf-8"),
        None if payload is None else payload.encode("utf-8"),
        None if result is None else result.encode("utf-8"),
        None if error is None else error.encode("utf-8"),
        None if actor is None else actor.encode("utf-8"),
        recorded_at_us,
        items,
    )


def commitment(name: str, salt: bytes, value: str) -> bytes:
    """``K(name, value)``: SHA-256 of ``"SGK1" || F(name) || F(salt) || F(utf8(value))``, 32 raw
    bytes (docs/adr/0019-erasure.md §1).

    Raises:
        SerializationError: ``salt`` is not 32 bytes.
    """
    if len(salt) != SALT_BYTES:
        raise SerializationError(f"the salt of {name} must be {SALT_BYTES} bytes")
    raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
    return hashlib.sha256(
        b"".join(
            (
                COMMITMENT_MAGIC,
                _U32(len(raw_name)),
                raw_name,
                _U32(SALT_BYTES),
                salt,
                _U32(len(raw_value)),
                raw_value,
            )
        )
    ).digest()


def committed(
    name: str, value: str | None, commitments: Mapping[str, str], salts: Mapping[str, str]
) -> bytes | None:
    """A form-2 data field as hashed: its commitment, computed from its opening (``salt`` and
    ``value``) when the value is present, else the stored one (the value was erased), else
    ``None`` (the field is null).

    Raises:
        SerializationError: a value without its salt, a salt without its value, or an opening
            that does not match the stored commitment.
    """
    stored = commitments.get(name)
    salt = salts.get(name)
    if value is None:
        if salt is not None:
            raise SerializationError(f"{name} has a salt but no value")
        return None if stored is None else bytes.fromhex(stored)
    if salt is None:
        raise SerializationError(f"{name} has a value but no salt: it cannot be committed to")
    computed = commitment(name, bytes.fromhex(salt), value)
    if stored is not None and bytes.fromhex(stored) != computed:
        raise SerializationError(f"the opening of {name} does not match its commitment")
    return computed


def canonical_bytes_v2_of(
    saga_id: str,
    seq: int,
    event_type: str,
    tool: str | None,
    payload: str | None,
    result: str | None,
    error: str | None,
    actor: str | None,
    recorded_at_us: int,
    attributes: Mapping[str, str] | None,
    *,
    commitments: Mapping[str, str],
    salts: Mapping[str, str],
) -> bytes:
    """``C2(entry)`` (docs/adr/0019-erasure.md §1) from plain field values:
    :func:`canonical_bytes_of` with ``payload``, ``result``, ``error`` and the data attributes
    (``undo_arguments``, ``note``, ``redaction``) replaced by their commitments.  A value present is
    committed to with its salt (and checked against a stored commitment); an erased one (no
    value, no salt) is its stored commitment.

    Raises:
        SerializationError: as :func:`canonical_bytes_of`, or as :func:`committed`.
    """
    if "\x00" in f"{saga_id}{event_type}{tool}{payload}{result}{error}{actor}":
        raise SerializationError("a text field contains U+0000")
    for name in (*commitments, *salts):
        if name not in DATA_ATTRIBUTES and name not in ("payload", "result", "error"):
            raise SerializationError(f"{name!r} is not a data field: it has no commitment")
    try:
        fields = [committed(n, v, commitments, salts) for n, v in _data(payload, result, error)]
        items: list[tuple[bytes, bytes]] = []
        for key, value in (attributes or {}).items():
            if "\x00" in key or "\x00" in value:
                raise SerializationError("an attribute contains U+0000")
            if key in DATA_ATTRIBUTES:
                digest = committed(key, value, commitments, salts)
                assert digest is not None  # the value is present
                items.append((key.encode("utf-8"), digest))
            else:
                items.append((key.encode("utf-8"), value.encode("utf-8")))
        for key in commitments.keys() & DATA_ATTRIBUTES:
            if key not in (attributes or {}):
                digest = committed(key, None, commitments, salts)
                assert digest is not None  # the key has a commitment
                items.append((key.encode("utf-8"), digest))
        unused = salts.keys() & DATA_ATTRIBUTES - (attributes or {}).keys()
        if unused:
            raise SerializationError(f"{min(unused)} has a salt but no value")
    except ValueError as exc:  # hex checked when the entry was made; from fields, here
        raise SerializationError(f"a commitment or salt is not hex: {exc}") from exc
    if type(seq) is not int or seq < 1:
        raise SerializationError("seq must be an int >= 1")
    if type(recorded_at_us) is not int:
        raise SerializationError("recorded_at_us must be an int (microseconds)")
    if not saga_id or not event_type:
        raise SerializationError("saga_id and event_type must be non-empty text")
    return canonical_layout(
        saga_id.encode("utf-8"),
        seq,
        event_type.encode("utf-8"),
        None if tool is None else tool.encode("utf-8"),
        fields[0],
        fields[1],
        fields[2],
        None if actor is None else actor.encode("utf-8"),
        recorded_at_us,
        sorted(items),
        magic=CANONICAL_MAGIC_V2,
    )


def committing(draft: EntryDraft, *, salt: Callable[[str], bytes] | None = None) -> EntryDraft:
    """``draft`` in form 2: a salt for each data field present (drawn fresh, or ``salt(name)``
    for reproducible vectors) and the commitment its opening makes.

    Raises:
        SerializationError: ``draft`` is already in form 2.
    """
    if draft.form != 1:
        raise SerializationError("the entry is already in form 2")
    present = [(n, v) for n, v in _data(draft.payload, draft.result, draft.error) if v is not None]
    present += [(k, v) for k, v in draft.attributes.items() if k in DATA_ATTRIBUTES]
    if salt is not None:
        salts = {name: salt(name) for name, _value in present}
    else:  # one draw from the system's generator for every field of the entry
        drawn = secrets.token_bytes(SALT_BYTES * len(present))
        salts = {
            name: drawn[i * SALT_BYTES : (i + 1) * SALT_BYTES]
            for i, (name, _value) in enumerate(present)
        }
    return dataclasses.replace(
        draft,
        form=2,
        salts={name: s.hex() for name, s in salts.items()},
        commitments={name: commitment(name, salts[name], v).hex() for name, v in present},
    )


def _data(
    payload: str | None, result: str | None, error: str | None
) -> tuple[tuple[str, str | None], ...]:
    return (("payload", payload), ("result", result), ("error", error))


_MAGIC_AND_LENGTH = struct.Struct(">4sI").pack  # the magic, then F(saga_id)'s length
_LIMIT = 0xFFFFFFFF  # F(bytes) needs len < 2^32 - 1: the all-ones length is the null marker


def canonical_layout(
    saga: bytes,
    seq: int,
    kind: bytes,
    tool: bytes | None,
    payload: bytes | None,
    result: bytes | None,
    error: bytes | None,
    actor: bytes | None,
    recorded_at_us: int,
    items: Sequence[tuple[bytes, bytes]] | None,
    prefix: bytes = b"",
    *,
    magic: bytes = CANONICAL_MAGIC,
) -> bytes:
    """``prefix || C(entry)`` (or ``C2`` with ``magic`` ``SGC2``, the data fields and data
    attributes given as their commitments) from the fields' UTF-8 bytes and the attribute
    pairs sorted by key: the one Python writer of the form (:func:`canonical_bytes`,
    :func:`canonical_bytes_of`, :func:`canonical_bytes_v2_of` and the journal's encoder,
    ``schemas._hotpath``, call it).  ``prefix`` lets a caller hash ``prev || C`` without copying
    ``C`` again.

    Raises:
        SerializationError: an int does not fit int64, or a field is too large for the form.
    """
    try:
        mapped = (
            _U32(len(items)) + b"".join([_U32(len(k)) + k + _U32(len(v)) + v for k, v in items])
            if items
            else _EMPTY_ATTRIBUTES
        )
        out = b"".join(
            (
                prefix,
                _MAGIC_AND_LENGTH(magic, len(saga)),
                saga,
                _INT_FIELD(8, seq),
                _U32(len(kind)),
                kind,
                _NULL if tool is None else _U32(len(tool)) + tool,
                _NULL if payload is None else _U32(len(payload)) + payload,
                _NULL if result is None else _U32(len(result)) + result,
                _NULL if error is None else _U32(len(error)) + error,
                _NULL if actor is None else _U32(len(actor)) + actor,
                _INT_FIELD(8, recorded_at_us),
                mapped,
            )
        )
    except struct.error as exc:
        for number in (seq, recorded_at_us):
            if not -(2**63) <= number < 2**63:
                raise SerializationError(
                    f"{number} does not fit the canonical form's int64"
                ) from exc
        raise SerializationError("field too large for the canonical form") from exc
    if len(out) >= _LIMIT:
        # Only so large an output can hold a field of exactly the null marker's length.
        parts = [saga, kind, tool, payload, result, error, actor]
        for key, value in items or ():
            parts += (key, value)
        if any(part is not None and len(part) >= _LIMIT for part in parts):
            raise SerializationError("field too large for the canonical form")
    return out


def hash_of(prev_digest: bytes, canonical: bytes) -> str:
    """``SHA-256(prev_digest || canonical)`` as lowercase hex: :func:`compute_hash` for a
    previous hash already held as its 32 raw bytes (e.g. the digest of the entry before)."""
    if len(prev_digest) != 32:
        raise SerializationError("previous hash must be 32 bytes")
    return hashlib.sha256(prev_digest + canonical).hexdigest()
