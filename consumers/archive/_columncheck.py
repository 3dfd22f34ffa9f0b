"""The column check: one saga's archived rows hashed straight from their columns.

The Python fast path of the archive audit (where the bulk verifier does not run): it passes
only rows that the reference path (each row rebuilt as a :class:`JournalEntry`, walked by
:func:`sagacity.chain.verify`) would pass, and explains nothing: a saga it does not pass is
the reference path's (:func:`~sagacity.consumers.archive._judging.audit_one`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sagacity.chain import canonical_bytes_of
from sagacity.entries._events import GENESIS_HASH


def verified_head(
    rows: Sequence[Sequence[Any]], *, after_seq: int, after_hash: str
) -> tuple[int, str] | None:
    """The head (seq, hash) of one saga's archived rows if they verify, hashed from the
    columns; ``None`` for anything else, which the caller then judges by the reference path.

    Agrees with building every row's :class:`JournalEntry` and running
    :func:`sagacity.chain.verify`: it accepts only rows that path would accept as valid
    entries and whose chain it would pass (seq by seq from ``after_seq``, each previous hash
    the one before, each hash recomputed over the same canonical bytes).  It never explains a
    failure: every reason, bad seq and detail comes from the reference path.
    """
    if after_seq == 0 and after_hash != GENESIS_HASH:
        return None  # the reference reports a wrong genesis here
    try:
        prev_digest = bytes.fromhex(after_hash)
    except ValueError:
        return None
    if len(prev_digest) != 32 or not rows:
        return None
    saga_id = rows[0][0]
    if type(saga_id) is not str or not saga_id:
        return None
    try:
        return _walked(rows, saga_id, after=(after_seq, after_hash, prev_digest))
    except Exception:  # anything odd is the reference path's to explain
        return None


def _walked(
    rows: Sequence[Sequence[Any]], saga_id: str, *, after: tuple[int, str, bytes]
) -> tuple[int, str] | None:
    """:func:`verified_head`'s walk over the rows from ``after`` (seq, hash and its bytes),
    raising on a value that is no entry's."""
    after_seq, prev, prev_digest = after
    expected = after_seq + 1
    canonical = canonical_bytes_of
    sha256 = hashlib.sha256
    loads = json.loads
    for row in rows:
        (
            saga,
            seq,
            event_type,
            tool,
            payload,
            result,
            error,
            actor,
            attributes_text,
            recorded_at_us,
            prev_hash,
            recorded_hash,
        ) = row
        if (
            seq != expected
            or prev_hash != prev
            or saga != saga_id
            or type(seq) is not int
            or type(recorded_at_us) is not int
            or type(event_type) is not str
            or not event_type
            # The text rules (no U+0000; None formats as "None"): the columns cannot hold
            # it, but a row that did would not be an entry.
            or "\x00" in f"{saga}{event_type}{tool}{payload}{result}{error}{actor}"
        ):
            return None
        if attributes_text == "{}":
            attributes = None
        else:
            # A false positive (an escaped backslash before "u0000") only falls back.
            if type(attributes_text) is not str or "\\u0000" in attributes_text:
                return None
            attributes = loads(attributes_text)
            if type(attributes) is not dict:
                return None
        # Non-text values fail to encode (AttributeError), lone surrogates too.
        digest = sha256(
            prev_digest
            + canonical(
                saga,
                seq,
                event_type,
                tool,
                payload,
                result,
                error,
                actor,
                recorded_at_us,
                attributes,
            )
        ).digest()
        if digest.hex() != recorded_hash:
            return None
        prev_digest = digest
        prev = recorded_hash
        expected += 1
    return expected - 1, prev
