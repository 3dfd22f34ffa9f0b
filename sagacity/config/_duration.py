"""One duration syntax for every option and setting: a whole number and a unit, ``15m``, ``400d``.

Units: ``ms``, ``s``, ``m`` (minutes, always), ``h``, ``d``, ``w``, ``mo`` (calendar months) and
``y`` (years).  ``m`` never means months: a retention (months to years) takes ``d``, ``mo`` or
``y``, and ``24m`` given as a retention is refused as ambiguous rather than read either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass

from sagacity.errors import DurationError

_SECONDS: dict[str, float] = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
    "mo": 30 * 86400,
    "y": 365 * 86400,
}
SHORT_UNITS = ("s", "m", "h", "d")
"""Units of a wait, an age or a window (``90s``, ``15m``, ``2h``, ``7d``)."""
RETENTION_UNITS = ("d", "mo", "y")
"""Units of a retention (``400d``, ``13mo``, ``2y``)."""
_EXAMPLES = {"ms": "500ms", "s": "90s", "m": "15m", "h": "2h", "d": "30d", "w": "2w", "mo": "13mo"}
_FORM = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")


@dataclass(frozen=True, kw_only=True)
class Duration:
    """A parsed duration: ``amount`` of ``unit``."""

    amount: int
    unit: str

    @property
    def seconds(self) -> float:
        """In seconds (a month counts 30 days, a year 365)."""
        return self.amount * _SECONDS[self.unit]

    @property
    def months(self) -> int:
        """In whole calendar months, days rounded up (so a retention never shrinks)."""
        if self.unit == "mo":
            return self.amount
        if self.unit == "y":
            return 12 * self.amount
        return math.ceil(self.seconds / _SECONDS["mo"])

    def __str__(self) -> str:
        return f"{self.amount}{self.unit}"


def parse_duration(
    text: str, *, units: Collection[str] = SHORT_UNITS, what: str = "a duration"
) -> Duration:
    """``text`` as a positive whole number of one of ``units``.

    Raises:
        DurationError: not of that form, zero, or a unit not in ``units``; an ``m`` where
            months are possible (``units`` has ``mo``) is refused as ambiguous.
    """
    examples = ", ".join(_EXAMPLES.get(unit, f"2{unit}") for unit in units)
    match = _FORM.fullmatch(text.lower())
    if match is None or match.group(2) not in _SECONDS or int(match.group(1)) <= 0:
        raise DurationError(
            f"{text!r} is not {what}: give a whole number and a unit ({'/'.join(units)}), "
            f"e.g. {examples}"
        )
    amount, unit = int(match.group(1)), match.group(2)
    if unit == "m" and "mo" in units and "m" not in units:
        raise DurationError(
            f"{text!r} is ambiguous as {what} (minutes or months?): write {amount}mo for "
            f"months (units: {'/'.join(units)})"
        )
    if unit not in units:
        raise DurationError(f"{text!r} is not {what}: the unit must be one of {'/'.join(units)}")
    return Duration(amount=amount, unit=unit)


def parse_seconds(text: str, *, what: str = "a duration") -> float:
    """Seconds in ``90s``, ``15m``, ``2h`` or ``7d`` (see :func:`parse_duration`)."""
    return parse_duration(text, units=SHORT_UNITS, what=what).seconds


def parse_retention(text: str) -> Duration:
    """A retention: ``400d``, ``13mo`` or ``2y``; ``24m`` is refused as ambiguous."""
    return parse_duration(text, units=RETENTION_UNITS, what="a retention")
