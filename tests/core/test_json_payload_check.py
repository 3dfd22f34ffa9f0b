"""``check_json_payload`` runs the decoder's scanner first and ``decode`` (the rule) only for
what the scanner does not settle: a payload is accepted or refused exactly as ``decode`` would,
with its message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sagacity import EntryDraft, EventType
from sagacity.errors import SerializationError
from sagacity.tools._codec import _JSON, check_json_payload

CASES = [
    "{}",
    "[]",
    '{"a":1}',
    '{"order_id":"ord-0001","amount":"129.90"}',
    '"text"',
    "1",
    "-0.5e-3",
    "1e999",
    "null",
    "true",
    " {}",
    "{} ",
    "\n{}\n",
    "\t[1, 2]\r\n",
    "",
    " ",
    "{}x",
    "{} {}",
    "{}}",
    "[1,]",
    "{'a': 1}",
    "NaN",
    "-Infinity",
    "Infinity",
    "[1, NaN]",
    '{"a": Infinity}',
    "tru",
    '"\\ud800"',
    '"a\\u0000b"',
    "\u00a0{}",  # not JSON whitespace
    "[" * 50 + "]" * 50,
    '{"a":1,"a":2}',
]


def _reference(payload: str) -> str:
    """``ok``, or the refusal ``check_json_payload`` words from ``decode``'s error."""
    try:
        _JSON.decode(payload)
    except ValueError as exc:
        return f"refused: the INTENT payload of tool 't' is not JSON: {exc}"
    return "ok"


def _checked(payload: str) -> str:
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, tool="t", payload=payload)
    try:
        check_json_payload(draft)
    except SerializationError as exc:
        return f"refused: {exc}"
    return "ok"


@pytest.mark.parametrize("payload", CASES, ids=lambda p: repr(p)[:30])
def test_accepted_and_refused_as_decode_would(payload: str) -> None:
    assert _checked(payload) == _reference(payload)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    _JSON_VALUES.map(json.dumps),
    st.sampled_from(["", " ", "\n", "x", "}", "]", ",", "NaN", " 1"]),
    st.sampled_from(["", " ", "\t", "x", "{", "-"]),
)
def test_generated_payloads_as_decode_would(body: str, tail: str, head: str) -> None:
    payload = head + body + tail
    assert _checked(payload) == _reference(payload)
