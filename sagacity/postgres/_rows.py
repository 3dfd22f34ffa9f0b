"""Archived rows read back as journal entries (the audit and the read index share this)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sagacity.entries._events import JournalEntry, event_type_of
from sagacity.errors import SerializationError

ROW_COLUMNS = (
    "saga_id, seq, event_type, tool, payload, result, error, actor, attributes::text,"
    " recorded_at_us, prev_hash, hash"
)
"""The select list of ``side_effect_journal`` that :func:`entry_of_row` reads."""

FORM_COLUMNS = ", form, commitments::text, salts::text"
"""Appended to :data:`ROW_COLUMNS` (archive schema 6 on, ``FORMS_VERSION``): each entry's
chain form, commitments and salts (docs/adr/0019-erasure.md), read with ``forms=True``."""


def entry_of_row(row: Sequence[Any], *, forms: bool = False) -> JournalEntry:
    """The entry a row selected with :data:`ROW_COLUMNS` holds (with ``forms``, followed by
    :data:`FORM_COLUMNS`).

    Raises:
        SerializationError: the row is malformed.
    """
    try:
        return JournalEntry(
            saga_id=row[0],
            seq=row[1],
            event_type=event_type_of(row[2]),
            tool=row[3],
            payload=row[4],
            result=row[5],
            error=row[6],
            actor=row[7],
            attributes=json.loads(row[8]) if row[8] != "{}" else {},
            recorded_at_us=row[9],
            prev_hash=row[10],
            hash=row[11],
            **(
                {"form": row[12], "commitments": json.loads(row[13]), "salts": json.loads(row[14])}
                if forms
                else {}
            ),
        )
    except (ValueError, TypeError) as exc:
        raise SerializationError(f"archived row {row[0]!r}/{row[1]} is malformed: {exc}") from exc
