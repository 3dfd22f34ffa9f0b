"""The journal's wire format as the archive's ingest checks a message of it: the port of
:mod:`sagacity.schemas` (``JOURNAL_WIRE``) that the archive service is handed.

Besides decoding a value into its entry (:class:`~sagacity.ports.EntryDecoder`'s call), the
archive's fast paths read the decoded record's fields directly, and the compiled ingest check
recognises a value of the current schema by its first bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sagacity.entries._events import JournalEntry

if TYPE_CHECKING:
    from sagacity.privacy._keys import KeyService


class JournalWire(Protocol):
    """The journal's own wire format.

    Raises (each reading method):
        SerializationError: the value is not an entry of a known schema.
        UnopenableError: a sealed field cannot be opened with ``keys``.
    """

    @property
    def prefix(self) -> bytes:
        """The first bytes of a message value of the current schema (marker and
        fingerprint)."""
        ...

    def decode(self, data: bytes, *, keys: KeyService | None = None) -> JournalEntry:
        """The entry ``data`` carries; ``keys`` open its sealed fields (``None``: left out,
        the entry verifying by its commitments)."""
        ...

    def record(self, data: bytes) -> dict[str, Any]:
        """The record ``data`` carries, resolved into the current schema (its fields as
        written, not yet checked as an entry)."""
        ...
