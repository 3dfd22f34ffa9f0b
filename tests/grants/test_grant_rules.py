"""The argument rules of a standing grant: parsed without eval, compared exactly."""

from __future__ import annotations

import pytest

from sagacity.errors import InvalidArgumentError
from sagacity.gate._grant_rules import all_hold, decode_rules, encode_rules, parse_rule, parse_rules


def holds(rule: str, payload: str) -> bool:
    return all_hold(parse_rules([rule]), payload)


@pytest.mark.parametrize(
    ("rule", "payload", "expected"),
    [
        ("amount <= 100", '{"amount":100}', True),
        ("amount <= 100", '{"amount":101}', False),
        ("amount <= 100", '{"amount":100.0}', True),
        ("amount <= 100", '{"amount":100.0000000000000001}', False),  # a float would say True
        ("amount < 1e2", '{"amount":99.99}', True),
        ("amount <= 100", '{"amount":"100"}', False),  # a string is not a number
        ("amount <= 100", '{"amount":true}', False),  # nor is a bool
        ("amount <= 100", '{"other":1}', False),  # a missing field covers nothing
        ("amount <= 100", "[1]", False),
        ("amount <= 100", "not json", False),
        ("amount <= 100", '{"amount":NaN}', False),
        ("amount >= 0", '{"amount":' + "9" * 5000 + "}", False),  # too long to parse: refused
        ("amount <= 99999999999999999999999", '{"amount":99999999999999999999998}', True),
        ("amount <= 9007199254740992", '{"amount":9007199254740993}', False),  # exact, not float
        ('to in ["a@x", "b@x"]', '{"to":"a@x"}', True),
        ('to in ["a@x", "b@x"]', '{"to":"c@x"}', False),
        ('to not in ["a@x"]', '{"to":"c@x"}', True),
        ("flag == true", '{"flag":1}', False),
        ("n == 1", '{"n":1.0}', True),
        ("n != 1", '{"n":true}', True),
        ('customer.country == "FR"', '{"customer":{"country":"FR"}}', True),
        ('customer.country == "FR"', '{"customer":"FR"}', False),
        ("to in [1]", '{"to":[1]}', False),  # a list is no literal
    ],
)
def test_a_rule_judges_the_payload_exactly(rule: str, payload: str, expected: bool) -> None:
    assert holds(rule, payload) is expected


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "amount",
        "amount <= ",
        "amount <= abc",
        "amount <= '100'",
        "__import__('os').system('x') == 1",
        "amount <= 100; drop",
        'amount <= "100"',  # an ordering compares numbers
        "to in []",
        'to in "a@x"',
        "to in [[1]]",
        "amount <= NaN",
        "amount <= Infinity",
        "amount === 1",
        "a..b == 1",
        "x" * 2000 + " == 1",
    ],
)
def test_a_rule_that_does_not_parse_is_refused(rule: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_rule(rule)


def test_a_grant_needs_rules_and_not_too_many() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one"):
        parse_rules([])
    with pytest.raises(InvalidArgumentError):
        parse_rules("amount <= 1")  # a str is not a list of rules
    with pytest.raises(InvalidArgumentError, match="at most"):
        parse_rules(["n == 1"] * 33)


def test_journaled_rules_read_back_as_written_and_damaged_ones_cover_nothing() -> None:
    rules = parse_rules(["amount <= 100", 'to in ["a@x", "b@x"]'])
    assert decode_rules(encode_rules(rules)) == rules
    assert decode_rules('["amount <= abc"]') is None
    assert decode_rules("{") is None
    assert decode_rules(None) is None
