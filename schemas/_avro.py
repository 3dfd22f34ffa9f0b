"""Avro encoding of journal entries, framed as Avro single-object encoding.

The frame is ``C3 01`` (marker), the 8-byte CRC-64-AVRO fingerprint of the writer schema's
parsing canonical form (little-endian, as the Avro specification writes it), then the entry in
Avro binary.  See docs/adr/0003-wire-format.md.

This module holds the schemas (the current one and every released one), an entry's encoding in
clear and the decoding of any message's record; sealed data fields are :mod:`._sealed`'s, the
journal's one-pass link and encode :mod:`._hotpath`'s.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from sagacity.entries._events import EntryDraft, JournalEntry
from sagacity.errors import SerializationError

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
LENGTH_CACHE = 4096


def _varint(zigzag: int) -> bytes:
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_high_groups = lru_cache(maxsize=256)(_varint)
"""The groups past the third of a large ``long``: an event time's change once in 2 seconds."""


def avro_long(value: int) -> bytes:
    """Avro ``long``: zig-zag, then little-endian base-128 groups."""
    if 0 <= value < LENGTH_CACHE:
        return LENGTHS[value]
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


LENGTHS = tuple(_varint(n << 1) for n in range(LENGTH_CACHE))
"""The encoded ``long`` of every small length, so that most strings cost one lookup."""
NULL_BRANCH = b"\x00"  # union index 0: null
STRING_BRANCH = b"\x02"  # union index 1: string


def avro_string(value: str) -> bytes:
    """Avro ``string``: the UTF-8 length, then the bytes."""
    data = value.encode("utf-8")
    size = len(data)
    return (LENGTHS[size] if size < LENGTH_CACHE else avro_long(size)) + data


def avro_optional(value: str | None) -> bytes:
    """Avro ``["null", "string"]``."""
    return NULL_BRANCH if value is None else STRING_BRANCH + avro_string(value)


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
def direct_encoding() -> bool:
    """Whether the current schema is the layout :func:`_encode_body` writes."""
    return _schema_layout(current_schema().schema) == _ENCODER_LAYOUT


def _encode_body(entry: JournalEntry) -> bytes:
    """The Avro binary of ``entry`` under the current schema, written directly.

    Byte for byte what ``fastavro.schemaless_writer`` writes for :func:`entry_record` (tests
    compare the two on generated entries); fastavro does the same work generically, at about
    twice the cost, on every event the journal publishes.
    """
    parts = [
        LENGTHS[SCHEMA_VERSION],
        avro_string(entry.saga_id),
        avro_long(entry.seq),
        avro_string(entry.event_type.value),
        avro_optional(entry.tool),
        avro_optional(entry.payload),
        avro_optional(entry.result),
        avro_optional(entry.error),
        avro_optional(entry.actor),
        avro_long(entry.recorded_at_us),
    ]
    attributes = entry.attributes
    if attributes:
        parts.append(avro_long(len(attributes)))
        for key, value in attributes.items():
            parts.append(avro_string(key))
            parts.append(avro_string(value))
    parts.append(LENGTHS[0])  # the end of the map's blocks
    parts.append(avro_string(entry.prev_hash))
    parts.append(avro_string(entry.hash))
    parts.append(form_tail(entry))
    return b"".join(parts)


_FORM_1_TAIL = LENGTHS[1] + LENGTHS[0] + LENGTHS[0] + LENGTHS[0]
"""``form`` 1, no commitments, no salts, nothing sealed: the end of every form-1 event."""


def hex_map(mapping: Mapping[str, str]) -> bytes:
    """An Avro ``map`` of strings (commitments or salts: hex by field name), in one block."""
    if not mapping:
        return LENGTHS[0]
    body = b"".join(avro_string(k) + avro_string(v) for k, v in mapping.items())
    return avro_long(len(mapping)) + body + LENGTHS[0]


def form_tail(entry: EntryDraft) -> bytes:
    """The Avro of ``form``, ``commitments`` and ``salts`` (docs/adr/0019-erasure.md)."""
    if entry.form == 1:
        return _FORM_1_TAIL
    tail = avro_long(entry.form) + hex_map(entry.commitments) + hex_map(entry.salts)
    return tail + LENGTHS[0]  # nothing sealed: see _sealed.encode_sealed


def encode_entry(entry: JournalEntry) -> bytes:
    """The message value for ``entry``: header then Avro binary of the current schema.

    Raises:
        SerializationError: a field does not fit the schema (e.g. a seq beyond 64 bits).
    """
    writer = current_schema()
    if direct_encoding():
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


def avro_optional_bytes(data: bytes | None) -> bytes:
    """An optional string already encoded to UTF-8, as ``["null", "string"]``."""
    if data is None:
        return NULL_BRANCH
    size = len(data)
    return STRING_BRANCH + (LENGTHS[size] if size < LENGTH_CACHE else avro_long(size)) + data


def avro_bytes(data: bytes) -> bytes:
    """A string already encoded to UTF-8 (or ``bytes``): its length, then the data."""
    size = len(data)
    return (LENGTHS[size] if size < LENGTH_CACHE else avro_long(size)) + data
