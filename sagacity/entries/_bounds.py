"""The domains of the integers and times a writer controls, and arithmetic that stays in them.

Every number a reader takes from the journal was chosen by whoever produced the message: a
seq, a time, an attribute such as ``signatures_required`` or ``expires_at_us``.  Readers check
each against its domain where they decode it, and compute deadlines with saturating
arithmetic, so no value a writer picks can overflow a column or a computation and stop a
service (docs/reliability.md, "Hostile inputs").

The domains: a seq and a time in microseconds are 64-bit signed integers (the wire's Avro
``long``, the tables' ``bigint``); a count of signatures is at least 1 and fits a 32-bit
``integer`` column; a saga id is at most :data:`SAGA_ID_MAX_BYTES` of UTF-8.
"""

from __future__ import annotations

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

SAGA_ID_MAX_BYTES = 1024
"""The longest saga id, in UTF-8 bytes: it keys every table a reader writes (an index entry is
at most about 2.7 kB in PostgreSQL), so a longer one is refused where an entry is made or
decoded, never by a database in the middle of a batch."""

SIGNATURES_MAX = INT32_MAX
"""The largest count of signatures a request is stored with: a larger claim is saturated to
it (still one no request reaches: the bar is never lowered to a reachable one)."""


def clamp(value: int, low: int, high: int) -> int:
    """``value`` saturated to ``[low, high]``."""
    return low if value < low else high if value > high else value


def saturating_add(a: int, b: int) -> int:
    """``a + b`` saturated to the 64-bit signed range (a deadline never wraps or overflows)."""
    return clamp(a + b, INT64_MIN, INT64_MAX)


def in_int64(value: object) -> bool:
    """Whether ``value`` is an ``int`` (not a ``bool``) within the 64-bit signed range."""
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def parse_int(raw: str | None, *, low: int, high: int) -> int | None:
    """The integer an attribute's text holds, saturated to ``[low, high]``; ``None`` when
    absent or not a decimal integer (the caller chooses the fail-closed default).

    A number of more digits than any 64-bit value has is saturated without being converted
    (its sign says to which end).
    """
    if raw is None:
        return None
    text = raw.strip()
    negative = text.startswith("-")
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits) > 20:
        return low if negative else high
    value = int(digits)
    return clamp(-value if negative else value, low, high)
