"""Journaling a call's outcome and a run's end: redacted values masked, and an event whose
text is larger than the broker takes journaled without its bulk.

:func:`append_bounded` is the one path by which the core journals what a call's result or
error reached (``EXECUTED``, ``FAILED``, a ``CONSTRAINT_VIOLATED`` refusal) and a run's end
(``COMPENSATION_REQUESTED``, ``SAGA_ENDED``): the texts of the values the run redacted are
masked first (:func:`sagacity.privacy._redaction.mask_draft`, docs/adr/0019-erasure.md §5).

An outcome is journaled after the tool ran: refusing it would leave an ``INTENT`` without an
outcome (a suspect step nobody undoes) or a saga without its end.  Such an event is journaled
without its bulk instead: an ``EXECUTED``/``COMPENSATED`` result is left out, an error is cut
short, and the SHA-256 and size of what was removed are recorded (``omitted*`` attributes).
An ``INTENT`` is never shortened: it is refused before the tool runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import EventTooLargeError
from sagacity.journal import Journal
from sagacity.privacy._redaction import mask_draft

ERROR_KEPT = 512
"""Characters of an error kept when the whole text is too large to journal."""
CUT_SHORT = " [cut short: too large to journal]"
_RESULT_DROPPED = frozenset({EventType.EXECUTED, EventType.COMPENSATED})


def without_bulk(draft: EntryDraft) -> EntryDraft | None:
    """``draft`` with its result left out or its error cut short, and the digest and size of
    what was removed; ``None`` when it has neither (nothing to remove)."""
    result, error = draft.result, draft.error
    if draft.event_type in _RESULT_DROPPED and result is not None:
        name, text, result = "result", result, None
    elif error is not None and len(error) > ERROR_KEPT:
        name, text = "error", error
        error = text[:ERROR_KEPT] + CUT_SHORT
    else:
        return None
    data = text.encode("utf-8")
    attributes = {
        **draft.attributes,
        attr.OMITTED: name,
        attr.OMITTED_SHA256: hashlib.sha256(data).hexdigest(),
        attr.OMITTED_BYTES: str(len(data)),
    }
    return dataclasses.replace(draft, result=result, error=error, attributes=attributes)


def append_bounded(
    journal: Journal,
    draft: EntryDraft,
    *,
    durable: bool = False,
    redacted: Collection[str] = (),
) -> JournalEntry:
    """``journal.append`` of ``draft`` with the ``redacted`` texts masked (the run's redacted
    values, :attr:`sagacity.saga._scope.SagaScope.redacted`); an event too large for the broker
    goes without its bulk.

    Raises:
        EventTooLargeError: the event is too large even without it.
    """
    draft = mask_draft(draft, redacted)
    try:
        return journal.append(draft, durable=durable)
    except EventTooLargeError:
        smaller = without_bulk(draft)
        if smaller is None:
            raise
        return journal.append(smaller, durable=durable)


async def append_bounded_async(
    journal: Journal,
    draft: EntryDraft,
    *,
    durable: bool = False,
    redacted: Collection[str] = (),
) -> JournalEntry:
    """:func:`append_bounded` with the journal's async API."""
    draft = mask_draft(draft, redacted)
    try:
        return await journal.append_async(draft, durable=durable)
    except EventTooLargeError:
        smaller = without_bulk(draft)
        if smaller is None:
            raise
        return await journal.append_async(smaller, durable=durable)
