"""The journal's wire format: Avro schemas and the codec for one journal event.

``journal_event.avsc`` is the single source of the format; ``released/`` keeps every released
version so decoders accept old events and a test proves old readers can read new ones.
See docs/adr/0003-wire-format.md.
"""

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
from sagacity.schemas._hotpath import link_encoded
from sagacity.schemas._sealed import decode_entry
from sagacity.schemas._wire import JOURNAL_WIRE, AvroWire

__all__ = [
    "HEADER_SIZE",
    "JOURNAL_WIRE",
    "MAGIC",
    "SCHEMA_VERSION",
    "AvroWire",
    "WriterSchema",
    "current_schema",
    "decode_entry",
    "decode_record",
    "encode_entry",
    "entry_record",
    "known_fingerprints",
    "link_encoded",
    "peek_fingerprint",
    "released_schemas",
    "schema_fingerprint",
]
