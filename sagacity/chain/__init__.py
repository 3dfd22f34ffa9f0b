"""The evidence rules, in one room: the chain's canonical form and its walk, the acceptance
rule, the column fast path, the saga grammar and the one vocabulary of a break.

Specified in docs/adr/0002-hash-chain.md precisely enough to write a verifier in another
language; ``tests/vectors/`` holds the vectors and ``tests/conformance/`` runs every writer and
walker over them.  What is where:

- :mod:`._form`: the canonical layout and its text rules (the one Python writer,
  :func:`canonical_layout`), commitments of form 2, linking and hashing.
- :mod:`._walk`: the walk of a stored chain (:func:`link_break`, :func:`verify`) and the one
  vocabulary of a break (:class:`BreakReason`), whose words every other vocabulary takes.
- :mod:`._acceptance`: which event a saga's chain takes next ("extends the tail").
- :mod:`._fastverify`: the walk over a binary ``COPY`` stream of archived rows (compiled in
  ``native/src/verify.rs``, with its Python twin here).
- :mod:`._grammar`: the impossible stories a linked chain may still tell.

This package's public names are the ones ``sagacity.chain`` has always had; it imports the
standard library and the core only, so that auditors' tools can reuse it.
"""

from __future__ import annotations

from sagacity.chain._form import (
    CANONICAL_MAGIC,
    CANONICAL_MAGIC_V2,
    COMMITMENT_MAGIC,
    SALT_BYTES,
    canonical_bytes,
    canonical_bytes_of,
    canonical_bytes_v2_of,
    canonical_layout,
    commitment,
    committed,
    committing,
    compute_hash,
    framed,
    hash_of,
    link,
    payload_sha256,
)
from sagacity.chain._walk import BreakReason, ChainVerdict, link_break, verify
from sagacity.entries._events import DATA_ATTRIBUTES, GENESIS_HASH, EntryDraft, JournalEntry
from sagacity.errors import SerializationError

__all__ = [
    "CANONICAL_MAGIC",
    "CANONICAL_MAGIC_V2",
    "COMMITMENT_MAGIC",
    "DATA_ATTRIBUTES",
    "GENESIS_HASH",
    "SALT_BYTES",
    "BreakReason",
    "ChainVerdict",
    "EntryDraft",
    "JournalEntry",
    "SerializationError",
    "canonical_bytes",
    "canonical_bytes_of",
    "canonical_bytes_v2_of",
    "canonical_layout",
    "commitment",
    "committed",
    "committing",
    "compute_hash",
    "framed",
    "hash_of",
    "link",
    "link_break",
    "payload_sha256",
    "verify",
]
