"""The draft's text rule has one reference, ``_check_text``; the compiled ``valid_texts``
(``native/src/draft.rs``), which ``EntryDraft`` asks first, accepts exactly what it accepts.
Were it to accept more, a draft the rule refuses would be made: these cases hold the two to
the same verdict, value by value and draft by draft (every case of tests/core/test_draft_init.py
and each text field)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sagacity import EntryDraft, EventType
from sagacity._native import native
from sagacity.entries import _events
from sagacity.errors import SerializationError

COMPILED: Callable[..., bool] | None = native("valid_texts")


class _Text(str):
    __slots__ = ()


VALUES: list[object] = [
    None,
    "",
    "a",
    "charge",
    '{"order_id":"ord-0001"}',
    "é",
    "日本語",
    "\U0001f600",
    "a\x00b",
    "\x00",
    "\ud800",
    "a\udfff",
    "\udbff\udfff",  # a pair of surrogates in a str is two lone ones: it does not encode
    "x" * 5000 + "\x00",
    _Text("subclass"),
    _Text("sub\x00class"),
    5,
    1.5,
    b"bytes",
    ["a"],
    True,
]


def _python_accepts(value: object) -> bool:
    try:
        _events._check_text("field", value)  # type: ignore[arg-type]
    except SerializationError:
        return False
    return True


@pytest.fixture
def compiled() -> Callable[..., bool]:
    if COMPILED is None:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")
    return COMPILED


def test_the_draft_asks_the_compiled_rule_where_it_is_built() -> None:
    # Where the compiled link step is, the draft's check is too (one module, one build).
    if os.environ.get("SAGACITY_NATIVE", "1") != "0" and native("link_entry") is not None:
        assert _events._valid_texts is not None


@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:40])
def test_one_value_same_verdict(compiled: Callable[..., bool], value: object) -> None:
    assert compiled(value) is _python_accepts(value)


def test_several_values_all_must_pass(compiled: Callable[..., bool]) -> None:
    assert compiled() is True
    for bad in [v for v in VALUES if not _python_accepts(v)]:
        for good in [v for v in VALUES if _python_accepts(v)]:
            assert compiled(good, bad) is False
            assert compiled(bad, good, good) is False
        assert compiled(*[v for v in VALUES if _python_accepts(v)]) is True


_PIECES = st.sampled_from(["a", "é", "\x00", "\ud800", "\udc00", "日", "\U0001f600", " ", "\x7f"])


@given(st.lists(_PIECES, max_size=12).map("".join) | st.text())
def test_generated_text_same_verdict(value: str) -> None:
    if COMPILED is None:
        return  # test_one_value_same_verdict says why it is skipped
    assert COMPILED(value) is _python_accepts(value)


TEXT_FIELDS = ["saga_id", "tool", "payload", "result", "error", "actor"]
BAD_TEXTS: list[object] = [v for v in VALUES if v is not None and not _python_accepts(v)]
DRAFT_CASES: list[dict[str, Any]] = [
    {"recorded_at_us": None},
    {"recorded_at_us": 2**63},
    {"tool": 5},
    {"payload": "a\x00b"},
    {"attributes": {"k": "\x00"}},
    {"attributes": {1: "v"}},
    {"attributes": [("k", "v")]},
    {"attributes": {"k": "\ud800"}},
    {"attributes": {"\ud800": "v"}},
    {"attributes": {"a": "1", "b": None, "c": "\x00"}},
    {"form": 3},
    {"commitments": {"payload": "ab" * 32}},
    {"saga_id": ""},
    {"saga_id": "s" * 1025},
    {"saga_id": "é" * 513},
    {"saga_id": "é" * 512},
    {"event_type": "NOT_A_TYPE"},
    {"tool": "charge", "payload": "{}", "attributes": {"ref_seq": "2", "writer": "w"}},
    *({name: bad} for name in TEXT_FIELDS for bad in BAD_TEXTS),
    *({name: "ok é"} for name in TEXT_FIELDS),
]


def _verdict(fields: dict[str, Any]) -> str:
    """``ok``, or the refusal's message."""
    given_fields = {"saga_id": "s", "event_type": EventType.INTENT, **fields}
    try:
        EntryDraft(**given_fields)
    except SerializationError as exc:
        return f"refused: {exc}"
    return "ok"


@pytest.mark.parametrize("fields", DRAFT_CASES, ids=lambda f: repr(f)[:60])
def test_a_draft_is_refused_alike_with_and_without_the_compiled_rule(
    compiled: Callable[..., bool], fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _events._valid_texts is compiled
    verdict = _verdict(fields)
    monkeypatch.setattr(_events, "_valid_texts", None)
    assert verdict == _verdict(fields)  # the reference's verdict, message included
