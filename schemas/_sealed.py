"""Sealed data fields on the wire (docs/adr/0019-erasure.md §3), and decoding an entry.

A form-2 entry's data fields (payload, result, error, the data attributes) travel as their
openings (salt, then the value's UTF-8) sealed under the saga's data key, in the ``sealed`` map;
the values and salts are left out.  Decoding opens them with the key service, or leaves them
absent (the entry then verifies by its commitments alone, as an erased one does).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Protocol

import fastavro

from sagacity.chain import SALT_BYTES
from sagacity.entries._events import DATA_ATTRIBUTES, JournalEntry, event_type_of
from sagacity.errors import SagaErasedError, SerializationError
from sagacity.schemas._avro import (
    LENGTHS,
    MAGIC,
    NULL_BRANCH,
    SCHEMA_VERSION,
    avro_bytes,
    avro_long,
    avro_optional,
    avro_string,
    current_schema,
    decode_record,
    direct_encoding,
    entry_record,
    hex_map,
)


class FieldSealer(Protocol):
    """What sealing and opening need of :class:`sagacity.privacy._keys.KeyService`."""

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
    if direct_encoding():
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
        LENGTHS[SCHEMA_VERSION],
        avro_string(entry.saga_id),
        avro_long(entry.seq),
        avro_string(entry.event_type.value),
        avro_optional(entry.tool),
        NULL_BRANCH,
        NULL_BRANCH,
        NULL_BRANCH,
        avro_optional(entry.actor),
        avro_long(entry.recorded_at_us),
    ]
    attributes = [(k, v) for k, v in entry.attributes.items() if k not in DATA_ATTRIBUTES]
    if attributes:
        parts.append(avro_long(len(attributes)))
        for key, value in attributes:
            parts.append(avro_string(key))
            parts.append(avro_string(value))
    parts.append(LENGTHS[0])
    parts.append(avro_string(entry.prev_hash))
    parts.append(avro_string(entry.hash))
    parts.append(avro_long(entry.form))
    parts.append(hex_map(entry.commitments))
    parts.append(LENGTHS[0])  # no salts: they travel inside the sealed openings
    if sealed:
        parts.append(avro_long(len(sealed)))
        for name, data in sealed.items():
            parts.append(avro_string(name))
            parts.append(avro_bytes(data))
    parts.append(LENGTHS[0])
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


def decode_entry(data: bytes, *, keys: FieldSealer | None = None) -> JournalEntry:
    """The :class:`JournalEntry` of a message value, every field exactly as written; sealed
    openings (docs/adr/0019-erasure.md §3) opened with ``keys``, else left out (the entry then
    verifies by its commitments, its values absent).

    The hash is not checked here (a verifier reports edited entries); it recomputes exactly
    for every entry :func:`encode_entry` produced.  An event type this release does not know
    decodes as an :class:`~sagacity.entries._events.UnknownEventType` carrying its exact name.

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
