"""Avro encoding of journal entries, framed as Avro single-object encoding.

The frame is ``C3 01`` (marker), the 8-byte CRC-64-AVRO fingerprint of the writer schema's
parsing canonical form (little-endian, as the Avro specification writes it), then the entry in
Avro binary.  See docs/adr/0003-wire-format.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from sagacity._events import (
    DATA_ATTRIBUTES,
    EntryDraft,
    JournalEntry,
    event_type_of,
    with_attribute,
    with_attribute_items,
)
from sagacity._native import native
from sagacity.chain import SALT_BYTES, canonical_bytes, canonical_layout, committing, link
from sagacity.errors import SagaErasedError, SerializationError

MAGIC = b"\xc3\x01"
"""The Avro single-object encoding marker that starts every journal message value."""

HEADER_SIZE = len(MAGIC) + 8
"""Bytes before the Avro body: the marker and the schema fingerprint."""

SCHEMA_VERSION = 2
"""The version of ``journal_event.avsc``; ``released/journal_event.v<N>.avsc`` is its copy."""

_SCHEMA_FILE = "journal_event.avsc"


@dataclass(frozen=True, kw_only=True)
class WriterSchema:
    """A schema some writer used: its version, parsed form and 8-byte fingerprint."""

    version: int
    schema: Any
    fingerprint: bytes
    canonical_form: str


def schema_fingerprint(schema: Any) -> bytes:
    """The 8 fingerprint bytes of a parsed schema, in single-object-encoding byte order."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _load(text: str, version: int) -> WriterSchema:
    parsed = fastavro.parse_schema(json.loads(text), _force=True)
    return WriterSchema(
        version=version,
        schema=parsed,
        fingerprint=schema_fingerprint(parsed),
        canonical_form=to_parsing_canonical_form(parsed),
    )


@cache
def current_schema() -> WriterSchema:
    """The schema this code writes (and reads every released version into)."""
    text = resources.files(__package__).joinpath(_SCHEMA_FILE).read_text("utf-8")
    return _load(text, SCHEMA_VERSION)


@cache
def released_schemas() -> Mapping[int, WriterSchema]:
    """Every released schema version shipped in ``released/``, by version number."""
    out: dict[int, WriterSchema] = {}
    folder = resources.files(__package__).joinpath("released")
    for item in folder.iterdir():
        name = item.name
        if not (name.startswith("journal_event.v") and name.endswith(".avsc")):
            continue
        version = int(name.removeprefix("journal_event.v").removesuffix(".avsc"))
        out[version] = _load(item.read_text("utf-8"), version)
    return dict(sorted(out.items()))


@cache
def _writers() -> Mapping[bytes, WriterSchema]:
    known = {w.fingerprint: w for w in released_schemas().values()}
    known[current_schema().fingerprint] = current_schema()
    return known


def known_fingerprints() -> frozenset[bytes]:
    """Fingerprints :func:`decode_entry` accepts: the current schema and every released one."""
    return frozenset(_writers())


def entry_record(entry: JournalEntry) -> dict[str, Any]:
    """The Avro record (a dict) for ``entry`` under the current schema."""
    return {
        "schema_version": SCHEMA_VERSION,
        "saga_id": entry.saga_id,
        "seq": entry.seq,
        "event_type": entry.event_type.value,
        "tool": entry.tool,
        "payload": entry.payload,
        "result": entry.result,
        "error": entry.error,
        "actor": entry.actor,
        "recorded_at_us": entry.recorded_at_us,
        "attributes": dict(entry.attributes),
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
        "form": entry.form,
        "commitments": dict(entry.commitments),
        "salts": dict(entry.salts),
        "sealed": {},
    }


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_LENGTH_CACHE = 4096


def _varint(zigzag: int) -> bytes:
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_high_groups = lru_cache(maxsize=256)(_varint)
"""The groups past the third of a large ``long``: an event time's change once in 2 seconds."""


def _long(value: int) -> bytes:
    """Avro ``long``: zig-zag, then little-endian base-128 groups."""
    if 0 <= value < _LENGTH_CACHE:
        return _LENGTHS[value]
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError(f"{value} does not fit an Avro long (64 bits)")
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag < 1 << 21:
        return _varint(zigzag)
    # The three low groups, each with its continuation bit, then the rest (cached).
    low = bytes(
        (
            ((zigzag & 0x7F) | 0x80),
            (((zigzag >> 7) & 0x7F) | 0x80),
            (((zigzag >> 14) & 0x7F) | 0x80),
        )
    )
    return low + _high_groups(zigzag >> 21)


_LENGTHS = tuple(_varint(n << 1) for n in range(_LENGTH_CACHE))
"""The encoded ``long`` of every small length, so that most strings cost one lookup."""
_NO_MAP: dict[str, str] = {}
"""An empty map for the compiled hot path's form-1 calls (it copies it, never changes it)."""
_NULL_BRANCH = b"\x00"  # union index 0: null
_STRING_BRANCH = b"\x02"  # union index 1: string


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    size = len(data)
    return (_LENGTHS[size] if size < _LENGTH_CACHE else _long(size)) + data


def _optional(value: str | None) -> bytes:
    return _NULL_BRANCH if value is None else _STRING_BRANCH + _string(value)


_ENCODER_LAYOUT = (
    ("schema_version", "int"),
    ("saga_id", "string"),
    ("seq", "long"),
    ("event_type", "string"),
    ("tool", ["null", "string"]),
    ("payload", ["null", "string"]),
    ("result", ["null", "string"]),
    ("error", ["null", "string"]),
    ("actor", ["null", "string"]),
    ("recorded_at_us", "long"),
    ("attributes", {"type": "map", "values": "string"}),
    ("prev_hash", "string"),
    ("hash", "string"),
    ("form", "int"),
    ("commitments", {"type": "map", "values": "string"}),
    ("salts", {"type": "map", "values": "string"}),
    ("sealed", {"type": "map", "values": "bytes"}),
)
"""The fields, in order, that :func:`_encode_body` writes; checked against the schema once."""


def _schema_layout(schema: Any) -> tuple[tuple[str, Any], ...]:
    layout = []
    for item in schema["fields"]:
        kind = item["type"]
        if isinstance(kind, dict):
            kind = {"type": kind["type"], "values": kind.get("values")}
        layout.append((item["name"], kind))
    return tuple(layout)


@cache
def _direct_encoding() -> bool:
    """Whether the current schema is the layout :func:`_encode_body` writes."""
    return _schema_layout(current_schema().schema) == _ENCODER_LAYOUT


def _encode_body(entry: JournalEntry) -> bytes:
    """The Avro binary of ``entry`` under the current schema, written directly.

    Byte for byte what ``fastavro.schemaless_writer`` writes for :func:`entry_record` (tests
    compare the two on generated entries); fastavro does the same work generically, at about
    twice the cost, on every event the journal publishes.
    """
    parts = [
        _LENGTHS[SCHEMA_VERSION],
        _string(entry.saga_id),
        _long(entry.seq),
        _string(entry.event_type.value),
        _optional(entry.tool),
        _optional(entry.payload),
        _optional(entry.result),
        _optional(entry.error),
        _optional(entry.actor),
        _long(entry.recorded_at_us),
    ]
    attributes = entry.attributes
    if attributes:
        parts.append(_long(len(attributes)))
        for key, value in attributes.items():
            parts.append(_string(key))
            parts.append(_string(value))
    parts.append(_LENGTHS[0])  # the end of the map's blocks
    parts.append(_string(entry.prev_hash))
    parts.append(_string(entry.hash))
    parts.append(_form_tail(entry))
    return b"".join(parts)


_FORM_1_TAIL = _LENGTHS[1] + _LENGTHS[0] + _LENGTHS[0] + _LENGTHS[0]
"""``form`` 1, no commitments, no salts, nothing sealed: the end of every form-1 event."""


def _hex_map(mapping: Mapping[str, str]) -> bytes:
    if not mapping:
        return _LENGTHS[0]
    body = b"".join(_string(k) + _string(v) for k, v in mapping.items())
    return _long(len(mapping)) + body + _LENGTHS[0]


def _form_tail(entry: EntryDraft) -> bytes:
    """The Avro of ``form``, ``commitments`` and ``salts`` (docs/adr/0019-erasure.md)."""
    if entry.form == 1:
        return _FORM_1_TAIL
    tail = _long(entry.form) + _hex_map(entry.commitments) + _hex_map(entry.salts)
    return tail + _LENGTHS[0]  # nothing sealed: see encode_sealed


def encode_entry(entry: JournalEntry) -> bytes:
    """The message value for ``entry``: header then Avro binary of the current schema.

    Raises:
        SerializationError: a field does not fit the schema (e.g. a seq beyond 64 bits).
    """
    writer = current_schema()
    if _direct_encoding():
        try:
            return MAGIC + writer.fingerprint + _encode_body(entry)
        except (AttributeError, ValueError, TypeError, OverflowError) as exc:
            raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(writer.fingerprint)
    try:
        fastavro.schemaless_writer(buf, writer.schema, entry_record(entry), strict=True)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    return buf.getvalue()


class FieldSealer(Protocol):
    """What sealing and opening need of :class:`sagacity._keys.KeyService`."""

    def prepare(self, saga_id: str) -> None: ...

    def material(self, saga_id: str) -> bytes: ...

    def seal(self, saga_id: str, seq: int, field_name: str, plaintext: bytes) -> bytes: ...

    def open(self, saga_id: str, seq: int, field_name: str, sealed: bytes) -> bytes: ...


def _openings(entry: JournalEntry) -> dict[str, str]:
    """The data fields of a form-2 entry whose value is present, by name."""
    values = {"payload": entry.payload, "result": entry.result, "error": entry.error}
    values.update((k, v) for k, v in entry.attributes.items() if k in DATA_ATTRIBUTES)
    return {name: value for name, value in values.items() if value is not None}


def encode_sealed(entry: JournalEntry, keys: FieldSealer) -> bytes:
    """The message value for a form-2 ``entry`` with each data field's opening (salt, then the
    value's UTF-8) sealed under the saga's data key (docs/adr/0019-erasure.md §3): the values,
    data attributes and salts are left out, the commitments and ``sealed`` carry them.

    Raises:
        SerializationError: ``entry`` is form 1 (it has no openings to seal), or a field does
            not fit the schema.
        EncryptionError / PersistenceError: from ``keys`` (a saga erased, the store down).
    """
    if entry.form != 2:
        raise SerializationError("only a form-2 entry is sealed: form 1 has no openings")
    sealed = {
        name: keys.seal(
            entry.saga_id,
            entry.seq,
            name,
            bytes.fromhex(entry.salts[name]) + value.encode("utf-8"),
        )
        for name, value in _openings(entry).items()
    }
    if _direct_encoding():
        try:
            return MAGIC + current_schema().fingerprint + _encode_sealed_body(entry, sealed)
        except (ValueError, TypeError, OverflowError) as exc:
            raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    record = entry_record(entry)
    record.update(
        payload=None,
        result=None,
        error=None,
        attributes={k: v for k, v in entry.attributes.items() if k not in DATA_ATTRIBUTES},
        salts={},
        sealed=sealed,
    )
    writer = current_schema()
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(writer.fingerprint)
    try:
        fastavro.schemaless_writer(buf, writer.schema, record, strict=True)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    return buf.getvalue()


def _encode_sealed_body(entry: JournalEntry, sealed: Mapping[str, bytes]) -> bytes:
    """The Avro binary of a sealed form-2 ``entry`` (no values, data attributes or salts; the
    ``sealed`` openings in their place), written directly as :func:`_encode_body` writes an
    entry in clear: byte for byte what fastavro writes for :func:`encode_sealed`'s record."""
    parts = [
        _LENGTHS[SCHEMA_VERSION],
        _string(entry.saga_id),
        _long(entry.seq),
        _string(entry.event_type.value),
        _optional(entry.tool),
        _NULL_BRANCH,
        _NULL_BRANCH,
        _NULL_BRANCH,
        _optional(entry.actor),
        _long(entry.recorded_at_us),
    ]
    attributes = [(k, v) for k, v in entry.attributes.items() if k not in DATA_ATTRIBUTES]
    if attributes:
        parts.append(_long(len(attributes)))
        for key, value in attributes:
            parts.append(_string(key))
            parts.append(_string(value))
    parts.append(_LENGTHS[0])
    parts.append(_string(entry.prev_hash))
    parts.append(_string(entry.hash))
    parts.append(_long(entry.form))
    parts.append(_hex_map(entry.commitments))
    parts.append(_LENGTHS[0])  # no salts: they travel inside the sealed openings
    if sealed:
        parts.append(_long(len(sealed)))
        for name, data in sealed.items():
            parts.append(_string(name))
            parts.append(_avro_bytes(data))
    parts.append(_LENGTHS[0])
    return b"".join(parts)


def _opened(record: dict[str, Any], keys: FieldSealer | None) -> None:
    """Fill ``record``'s values and salts from its sealed openings, in place; without ``keys``,
    or for an erased saga, the fields stay absent (the entry then verifies by its commitments
    alone, as an erased one does).

    Raises:
        CiphertextAuthenticationError: a sealed field was altered or moved ("authentication
            failed").
        SerializationError: an opening is shorter than its salt.
    """
    sealed = record.get("sealed") or {}
    if not sealed or keys is None:
        return
    opened: dict[str, bytes] = {}
    for name, box in sorted(sealed.items()):
        try:
            opened[name] = keys.open(record["saga_id"], record["seq"], name, box)
        except SagaErasedError:
            return  # erased: nothing is opened
    salts = dict(record["salts"])
    attributes = dict(record["attributes"])
    for name, opening in opened.items():
        if len(opening) < SALT_BYTES:
            raise SerializationError(f"the opening of {name} is shorter than its salt")
        salt, value = opening[:SALT_BYTES], opening[SALT_BYTES:].decode("utf-8")
        salts[name] = salt.hex()
        if name in DATA_ATTRIBUTES:
            attributes[name] = value
        else:
            record[name] = value
    record["salts"] = salts
    record["attributes"] = attributes


def peek_fingerprint(data: bytes) -> bytes:
    """The writer-schema fingerprint of a message value, checking only the header.

    Raises:
        SerializationError: the value is shorter than the header or lacks the marker.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SerializationError(f"a journal message is bytes, got {type(data).__name__}")
    view = bytes(data[:HEADER_SIZE])
    if len(view) < HEADER_SIZE:
        raise SerializationError(f"truncated: {len(data)} bytes, the header alone is {HEADER_SIZE}")
    if view[: len(MAGIC)] != MAGIC:
        raise SerializationError(
            f"not a journal event: starts with {view[:2].hex()}, expected {MAGIC.hex()}"
        )
    return view[len(MAGIC) :]


def decode_record(data: bytes) -> dict[str, Any]:
    """The Avro record of a message value, resolved into the current schema.

    Raises:
        SerializationError: bad header, unknown fingerprint, invalid or truncated Avro, or
            bytes left over after the record.
    """
    fp = peek_fingerprint(data)
    writer = _writers().get(fp)
    if writer is None:
        raise SerializationError(
            f"unknown schema fingerprint {fp.hex()}: written by a newer or foreign writer"
        )
    reader = current_schema()
    buf = io.BytesIO(bytes(data))
    buf.seek(HEADER_SIZE)
    try:
        record = fastavro.schemaless_reader(
            buf,
            writer.schema,
            None if writer.fingerprint == reader.fingerprint else reader.schema,
        )
    except Exception as exc:  # fastavro raises many types on corrupt input; all mean garbage
        raise SerializationError(
            f"invalid Avro for schema v{writer.version}: {type(exc).__name__}: {exc}"
        ) from exc
    leftover = len(data) - buf.tell()
    if leftover:
        raise SerializationError(f"{leftover} unexpected bytes after the Avro record")
    if not isinstance(record, dict):
        raise SerializationError("Avro body is not a record")
    return record


def decode_entry(data: bytes, *, keys: FieldSealer | None = None) -> JournalEntry:
    """The :class:`JournalEntry` of a message value, every field exactly as written; sealed
    openings (docs/adr/0019-erasure.md §3) opened with ``keys``, else left out (the entry then
    verifies by its commitments, its values absent).

    The hash is not checked here (a verifier reports edited entries); it recomputes exactly
    for every entry :func:`encode_entry` produced.  An event type this release does not know
    decodes as an :class:`~sagacity._events.UnknownEventType` carrying its exact name.

    Raises:
        SerializationError: with the reason, for anything that is not a decodable entry.
        CiphertextAuthenticationError: a sealed field does not authenticate.
        EncryptionError / PersistenceError: from ``keys``.
    """
    record = decode_record(data)
    try:
        _opened(record, keys)
    except UnicodeDecodeError as exc:
        raise SerializationError(f"an opened value is not UTF-8: {exc}") from exc
    return JournalEntry(
        saga_id=record["saga_id"],
        seq=record["seq"],
        # A type this release does not know is carried by name (UnknownEventType): it hashes
        # and links like any other event, so the chain after it stays intact.
        event_type=event_type_of(record["event_type"]),
        tool=record["tool"],
        payload=record["payload"],
        result=record["result"],
        error=record["error"],
        actor=record["actor"],
        attributes=record["attributes"],
        recorded_at_us=record["recorded_at_us"],
        prev_hash=record["prev_hash"],
        hash=record["hash"],
        form=record["form"],
        commitments=record["commitments"],
        salts=record["salts"],
    )


_U32 = struct.Struct(">I").pack


def _avro_optional(data: bytes | None) -> bytes:
    if data is None:
        return _NULL_BRANCH
    size = len(data)
    return _STRING_BRANCH + (_LENGTHS[size] if size < _LENGTH_CACHE else _long(size)) + data


def _avro_bytes(data: bytes) -> bytes:
    size = len(data)
    return (_LENGTHS[size] if size < _LENGTH_CACHE else _long(size)) + data


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
    return MAGIC + current_schema().fingerprint + _LENGTHS[SCHEMA_VERSION]


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
    if not _direct_encoding():
        if attribute is not None:
            draft = with_attribute(draft, *attribute)
        entry = link(draft, seq=seq, prev_hash=prev_hash)
        return entry, encode_entry(entry)
    linked = _native_link_entry
    if linked is not None:
        # The compiled link step, entry included (form 1); what it hands back (None) is judged
        # below, where the errors are raised.
        try:
            made = linked(_native_header(), prev_hash, seq, draft, JournalEntry, attribute)
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
    native = _native_link_encode
    if native is not None:
        try:
            out = native(
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
            out = None  # the Python path below says what is wrong
        if out is not None:
            digest, value = out
            entry = JournalEntry._linked(
                draft,
                seq=seq,
                prev_hash=prev_hash,
                hash=digest,
                attributes=None if attribute is None else attributes,
            )
            return entry, value
    if attribute is not None:
        draft = with_attribute(draft, *attribute)
    return _link_encoded_python(draft, seq=seq, prev_hash=prev_hash, prev=prev)


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
    if sealed is not None and data and draft.form == 1 and _direct_encoding():
        # The compiled sealer, entry included; what it hands back (None) is judged below,
        # where the errors are raised.
        try:
            made = sealed(
                _native_header(),
                prev_hash,
                seq,
                draft,
                JournalEntry,
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
            _long(len(items))
            + b"".join(_avro_bytes(k) + _avro_bytes(v) for k, v in items)
            + _LENGTHS[0]
        )
    else:
        items = None
        avro_attributes = _LENGTHS[0]
    # prev || C(entry), written by the chain's one Python writer (docs/adr/0002-hash-chain.md).
    if draft.form == 1:
        hashed = canonical_layout(
            saga, seq, kind, tool, payload, result, error, actor, recorded, items, prefix=prev
        )
    else:
        hashed = prev + canonical_bytes(draft, seq=seq)
    try:
        time_field = _long(recorded)
    except (struct.error, OverflowError) as exc:
        raise SerializationError(f"entry does not fit the journal schema: {exc}") from exc
    digest = hashlib.sha256(hashed).hexdigest()
    entry = JournalEntry._linked(draft, seq=seq, prev_hash=prev_hash, hash=digest)
    value = b"".join(
        (
            MAGIC,
            current_schema().fingerprint,
            _LENGTHS[SCHEMA_VERSION],
            _avro_bytes(saga),
            _long(seq),
            _avro_bytes(kind),
            _avro_optional(tool),
            _avro_optional(payload),
            _avro_optional(result),
            _avro_optional(error),
            _avro_optional(actor),
            time_field,
            avro_attributes,
            _string(prev_hash),
            _LENGTHS[64],
            digest.encode(),
            _form_tail(draft),
        )
    )
    return entry, value
