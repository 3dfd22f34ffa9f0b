"""The argument rules of a standing grant: a small language over a call's JSON payload.

A grant (:mod:`sagacity.gate._grants`) covers a call only when every one of its rules holds for the
call's arguments.  A rule is one comparison of a payload field with a JSON literal::

    amount <= 100
    currency == "EUR"
    to in ["a@example.com", "b@example.com"]
    priority not in [1, 2]
    customer.country != "XX"

The field is a name, or a dotted path into nested objects (``[A-Za-z_][A-Za-z0-9_]*`` per
part); the operator one of ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``; the
value a JSON literal (``in`` and ``not in`` take a JSON list of literals), read by the JSON
parser, never evaluated.  Numbers are compared exactly: JSON integers as ``int`` and decimals
as :class:`~decimal.Decimal`, on both sides, never as floats (``100.0000000000000001 <= 100``
is false); ``true`` and ``false`` are not numbers.  An ordering compares numbers only.  A
field the payload lacks, or whose value has another type than the rule's, makes the rule
false: a grant covers only what its rules can judge.  A rule that does not parse is refused
when the grant is made (:class:`~sagacity.errors.InvalidArgumentError`), and a stored grant
whose rules do not parse covers nothing.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from sagacity.errors import InvalidArgumentError

MAX_RULES = 32
"""Rules one grant may carry."""
MAX_RULE_CHARS = 1024
"""Characters one rule may have."""
MAX_PAYLOAD_CHARS = 1_000_000
"""A payload longer than this is judged by no grant (it goes to a request)."""

_RULE = re.compile(
    r"^\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*"
    r"(?P<op>==|!=|<=|>=|<|>|not\s+in\b|in\b)\s*(?P<value>\S.*?)\s*$",
    re.DOTALL,
)
_ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the JSON grammar rules this out
        raise ValueError(f"not a number: {text!r}") from exc
    if not value.is_finite():  # pragma: no cover - as above
        raise ValueError(f"not a finite number: {text!r}")
    return value


def loads_exact(text: str) -> Any:
    """``text`` parsed as JSON with exact numbers (``int``, :class:`~decimal.Decimal`).

    Raises:
        ValueError: not JSON (``NaN`` and ``Infinity`` included), or an integer too long.
    """
    return json.loads(text, parse_float=_decimal, parse_constant=_constant)


def _is_number(value: object) -> bool:
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


def _is_literal(value: object) -> bool:
    return value is None or isinstance(value, str | bool) or _is_number(value)


def _same(left: object, right: object) -> bool:
    """JSON equality with exact numbers: a number equals a number of the same value, a bool
    only a bool (``true`` is not ``1``)."""
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    return type(left) is type(right) and left == right


@dataclass(frozen=True, kw_only=True, slots=True)
class ArgumentRule:
    """One parsed rule: ``path`` (the field's parts), ``op`` and ``value``."""

    text: str
    path: tuple[str, ...]
    op: str
    value: Any

    def holds(self, arguments: object) -> bool:
        """Whether the rule holds for ``arguments`` (a payload parsed by :func:`loads_exact`)."""
        found: object = arguments
        for part in self.path:
            if not isinstance(found, dict) or part not in found:
                return False
            found = found[part]
        if self.op in _ORDERINGS:
            if not (_is_number(found) and _is_number(self.value)):
                return False
            return bool(_ORDERINGS[self.op](found, self.value))
        if not _is_literal(found):
            return False
        if self.op == "==":
            return _same(found, self.value)
        if self.op == "!=":
            return not _same(found, self.value)
        member = any(_same(found, item) for item in self.value)
        return member if self.op == "in" else not member


def parse_rule(text: object) -> ArgumentRule:
    """``text`` as a rule.

    Raises:
        InvalidArgumentError: it is not a rule of the language (the message says why).
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"a grant rule must be a non-empty str, got {text!r}")
    if len(text) > MAX_RULE_CHARS:
        raise InvalidArgumentError(f"a grant rule has at most {MAX_RULE_CHARS} characters")
    match = _RULE.match(text)
    if match is None:
        raise InvalidArgumentError(
            f"grant rule {text!r} is not 'FIELD OP VALUE' (OP one of ==, !=, <, <=, >, >=, "
            "in, not in; VALUE a JSON literal, a JSON list for in)"
        )
    op = " ".join(match["op"].split())
    try:
        value = loads_exact(match["value"])
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(
            f"grant rule {text!r}: the value is not a JSON literal ({exc})"
        ) from exc
    if op in ("in", "not in"):
        if not isinstance(value, list) or not value or not all(_is_literal(v) for v in value):
            raise InvalidArgumentError(
                f"grant rule {text!r}: {op} takes a non-empty JSON list of literals"
            )
    elif op in _ORDERINGS and not _is_number(value):
        raise InvalidArgumentError(f"grant rule {text!r}: {op} compares with a number")
    elif not _is_literal(value):
        raise InvalidArgumentError(f"grant rule {text!r}: {op} compares with a JSON literal")
    return ArgumentRule(
        text=text.strip(), path=tuple(match["field"].split(".")), op=op, value=value
    )


def parse_rules(texts: Sequence[object]) -> tuple[ArgumentRule, ...]:
    """Every rule of ``texts`` parsed (a grant needs at least one).

    Raises:
        InvalidArgumentError: none given, too many, or one does not parse.
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidArgumentError(f"grant rules must be a list of str, got {texts!r}")
    if not texts:
        raise InvalidArgumentError(
            "a grant needs at least one argument rule (e.g. 'amount <= 100'): a grant "
            "covers only the calls its rules describe"
        )
    if len(texts) > MAX_RULES:
        raise InvalidArgumentError(f"a grant carries at most {MAX_RULES} rules")
    return tuple(parse_rule(text) for text in texts)


def encode_rules(rules: Sequence[ArgumentRule]) -> str:
    """The rules as journaled and signed: a compact JSON list of their texts."""
    return json.dumps([r.text for r in rules], separators=(",", ":"), ensure_ascii=False)


def decode_rules(text: str | None) -> tuple[ArgumentRule, ...] | None:
    """Journaled rules parsed again (``None``: unreadable, so the grant covers nothing)."""
    if text is None or len(text) > MAX_RULES * (MAX_RULE_CHARS + 8):
        return None
    try:
        texts = json.loads(text)
        return parse_rules(texts) if isinstance(texts, list) else None
    except (ValueError, RecursionError, InvalidArgumentError):
        return None


def all_hold(rules: Sequence[ArgumentRule], payload: str) -> bool:
    """Whether every rule holds for the JSON ``payload`` (false when it does not parse)."""
    if len(payload) > MAX_PAYLOAD_CHARS:
        return False
    try:
        arguments = loads_exact(payload)
    except (ValueError, RecursionError):
        return False
    return all(rule.holds(arguments) for rule in rules)
