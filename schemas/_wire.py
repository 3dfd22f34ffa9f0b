"""The journal's wire format as one object: the :class:`sagacity.ports.JournalWire` the
composition root hands the archive service (its ingest's fast paths read records and the
current schema's first bytes; the reference path decodes entries)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sagacity.entries._events import JournalEntry
from sagacity.schemas._avro import MAGIC, current_schema, decode_record
from sagacity.schemas._sealed import decode_entry

if TYPE_CHECKING:
    from sagacity.privacy._keys import KeyService


class AvroWire:
    """The journal's Avro wire format (docs/adr/0003-wire-format.md)."""

    @functools.cached_property
    def prefix(self) -> bytes:
        """The marker and the fingerprint of the current schema."""
        return MAGIC + current_schema().fingerprint

    def decode(self, data: bytes, *, keys: KeyService | None = None) -> JournalEntry:
        """:func:`sagacity.schemas.decode_entry`."""
        return decode_entry(data, keys=keys)

    def record(self, data: bytes) -> dict[str, Any]:
        """:func:`sagacity.schemas.decode_record`."""
        return decode_record(data)


JOURNAL_WIRE = AvroWire()
"""The journal's wire format."""
