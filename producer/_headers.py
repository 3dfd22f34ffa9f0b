"""The headers every journal record carries beside its saga's (``event_type`` and
``schema_fingerprint``), made once, with the bytes each takes: the journal's size check adds
them to every event (docs/events.md, "Headers")."""

from __future__ import annotations

import functools

from sagacity.entries._events import EventType
from sagacity.schemas import current_schema


def type_header_of(name: str) -> tuple[tuple[str, bytes], int]:
    """The ``event_type`` header of the type ``name`` and the bytes it takes."""
    return ("event_type", name.encode()), len("event_type") + len(name.encode())


EVENT_TYPE_HEADERS = {t.value: type_header_of(t.value) for t in EventType}
"""The header of each known event type and its size (:func:`type_header_of`), made once."""


@functools.cache
def fingerprint_header() -> tuple[str, bytes]:
    """The ``schema_fingerprint`` header: the writer's schema's fingerprint, hex."""
    return ("schema_fingerprint", current_schema().fingerprint.hex().encode())
