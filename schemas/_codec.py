"""The codec of one journal event, by the names the services import it under.

The codec itself is three modules, one concept each: :mod:`._avro` (the schemas, an entry's
Avro in clear, a message's record), :mod:`._sealed` (sealed data fields, decoding an entry)
and :mod:`._hotpath` (the journal's one-pass link and encode, compiled where installed).
"""

from __future__ import annotations

from sagacity.schemas._avro import (
    HEADER_SIZE,
    MAGIC,
    SCHEMA_VERSION,
    WriterSchema,
    current_schema,
    decode_record,
    encode_entry,
    entry_record,
    known_fingerprints,
    peek_fingerprint,
    released_schemas,
    schema_fingerprint,
)
from sagacity.schemas._hotpath import NATIVE, link_encoded, link_encoded_sealed
from sagacity.schemas._sealed import FieldSealer, decode_entry, encode_sealed

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "NATIVE",
    "SCHEMA_VERSION",
    "FieldSealer",
    "WriterSchema",
    "current_schema",
    "decode_entry",
    "decode_record",
    "encode_entry",
    "encode_sealed",
    "entry_record",
    "known_fingerprints",
    "link_encoded",
    "link_encoded_sealed",
    "peek_fingerprint",
    "released_schemas",
    "schema_fingerprint",
]
