"""The common draft's checks, compiled (``draft_fields``, ``native/src/draft.rs``), which
``EntryDraft.__init__`` asks first: where they take a draft it skips ``__post_init__``, so they
must never take what ``__post_init__`` refuses, and must leave the draft exactly as it would
(the same fields, of the same types; the attributes frozen and sorted by key).  These cases hold
the two paths to one outcome, draft by draft: every case of tests/core/test_draft_texts.py, the
accepted drafts below, and generated ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity import EntryDraft, EventType, UnknownEventType
from sagacity._native import native
from sagacity.entries import _events
from sagacity.errors import SerializationError
from tests.core.test_draft_texts import DRAFT_CASES

COMPILED: Callable[..., Any] | None = native("draft_fields")


class _Text(str):
    __slots__ = ()


ACCEPTED_CASES: list[dict[str, Any]] = [
    {},
    {"tool": "charge", "payload": '{"order_id":"ord-0001"}'},
    {"event_type": EventType.EXECUTED, "result": "ok", "attributes": {"ref_seq": "2"}},
    {"attributes": {"z": "1", "a": "2", "m": "3"}},
    {"attributes": {"é": "1", "z": "2", "Z": "3", "\U0001f600": "4", "e": "5"}},
    {"attributes": {}},
    {"attributes": {"k": ""}},
    {"recorded_at_us": 0},
    {"recorded_at_us": -(2**63)},
    {"recorded_at_us": 2**63 - 1},
    {"saga_id": "s" * 1024},
    {"saga_id": "é" * 512, "actor": "approver@example.com"},
    {"saga_id": _Text("sub"), "tool": _Text("t"), "attributes": {_Text("k"): _Text("v")}},
    {"event_type": EventType.SAGA_ENDED, "result": "OK", "error": "日本語"},
    {"payload": "", "result": "", "error": "", "actor": ""},
    *({"event_type": kind} for kind in EventType),
]
"""Drafts both paths make."""

DECLINED_CASES: list[dict[str, Any]] = [
    {"form": 2},
    {"form": True},
    {"form": 1.0},
    {"commitments": {}},
    {"salts": MappingProxyType({})},
    {"commitments": {"payload": "ab" * 32}, "form": 2, "payload": None},
    {"event_type": "INTENT"},
    {"event_type": UnknownEventType("FROM_A_NEWER_RELEASE")},
    {"attributes": MappingProxyType({"k": "v"})},
    {"attributes": {"k": None}},
    {"attributes": {None: "v"}},
    {"attributes": {"k": 1}},
    {"attributes": [("k", "v")]},
    {"recorded_at_us": True},
    {"recorded_at_us": 2**63},
    {"recorded_at_us": 1.5},
    {"recorded_at_us": None},
    {"saga_id": "s" * 1025},
    {"saga_id": ""},
    {"saga_id": None},
    {"tool": b"bytes"},
]
"""Arguments the compiled checks decline (the Python path judges them: some it accepts as
given, most it refuses)."""


def _arguments(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {"saga_id": "s", "event_type": EventType.INTENT, **fields}


def _state(draft: EntryDraft) -> tuple[Any, ...]:
    """Every field of ``draft`` with its type (the attributes' items in their order)."""
    out: list[Any] = []
    for name in _events._COPIED:
        value = getattr(draft, name)
        if isinstance(value, Mapping):
            value = (type(value), list(value.items()))
        out.append((name, type(value), value))
    return tuple(out)


def _outcome(fields: Mapping[str, Any]) -> tuple[str, Any]:
    """``("made", state)`` or ``("refused", message)``; the time is pinned when not given
    (and checked to be now)."""
    arguments = _arguments(fields)
    before = time.time_ns() // 1_000
    try:
        draft = EntryDraft(**arguments)
    except SerializationError as exc:
        return "refused", str(exc)
    after = time.time_ns() // 1_000
    state = _state(draft)
    if "recorded_at_us" not in arguments:
        assert before <= draft.recorded_at_us <= after
        state = tuple(s for s in state if s[0] != "recorded_at_us")
    return "made", state


def _both_paths(fields: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _events._draft_fields is COMPILED
    compiled = _outcome(fields)
    with monkeypatch.context() as patch:
        patch.setattr(_events, "_draft_fields", None)
        assert compiled == _outcome(fields)  # the reference's outcome, message included


@pytest.fixture
def compiled() -> Callable[..., Any]:
    if COMPILED is None:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")
    return COMPILED


def test_the_draft_asks_the_compiled_checks_where_they_are_built() -> None:
    if native("valid_texts") is not None:  # one module, one build
        assert _events._draft_fields is not None


@pytest.mark.parametrize(
    "fields", [*DRAFT_CASES, *ACCEPTED_CASES, *DECLINED_CASES], ids=lambda f: repr(f)[:60]
)
def test_a_draft_is_made_or_refused_alike_on_both_paths(
    compiled: Callable[..., Any], fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _both_paths(fields, monkeypatch)


def _call(compiled: Callable[..., Any], fields: Mapping[str, Any]) -> Any:
    a = {
        "tool": None,
        "payload": None,
        "result": None,
        "error": None,
        "actor": None,
        "attributes": _events._NO_ATTRIBUTES,
        "recorded_at_us": _events._NOW,
        "form": 1,
        "commitments": _events._NO_COMMITMENTS,
        "salts": _events._NO_COMMITMENTS,
        **_arguments(fields),
    }
    return compiled(
        a["saga_id"],
        a["event_type"],
        a["tool"],
        a["payload"],
        a["result"],
        a["error"],
        a["actor"],
        a["attributes"],
        a["recorded_at_us"],
        a["form"],
        a["commitments"],
        a["salts"],
    )


@pytest.mark.parametrize("fields", ACCEPTED_CASES, ids=lambda f: repr(f)[:60])
def test_the_compiled_checks_take_the_common_draft(
    compiled: Callable[..., Any], fields: dict[str, Any]
) -> None:
    kept = _call(compiled, fields)
    assert kept is not None
    attributes, recorded_at_us = kept
    given_attributes = fields.get("attributes")
    if not given_attributes:
        assert attributes is _events._NO_ATTRIBUTES
    else:
        assert type(attributes) is MappingProxyType
        assert list(attributes.items()) == sorted(given_attributes.items())
        assert attributes is not given_attributes
    if "recorded_at_us" in fields:
        assert recorded_at_us is fields["recorded_at_us"]
    else:
        assert type(recorded_at_us) is int
        assert abs(recorded_at_us - time.time_ns() // 1_000) < 60_000_000


@pytest.mark.parametrize("fields", DECLINED_CASES, ids=lambda f: repr(f)[:60])
def test_the_compiled_checks_decline_the_rest(
    compiled: Callable[..., Any], fields: dict[str, Any]
) -> None:
    assert _call(compiled, fields) is None


def test_a_subclass_draft_runs_its_own_post_init(compiled: Callable[..., Any]) -> None:
    """The compiled checks stand for ``EntryDraft.__post_init__`` only: a subclass that checks
    more is always asked."""
    checked: list[str] = []

    class Checked(EntryDraft):
        __slots__ = ()

        def __post_init__(self) -> None:
            EntryDraft.__post_init__(self)
            checked.append(self.saga_id)

    Checked(saga_id="sub", event_type=EventType.INTENT, attributes={"b": "2", "a": "1"})
    assert checked == ["sub"]
    assert _call(compiled, {}) is not None  # the same arguments the compiled checks take


def test_the_frozen_attributes_are_a_copy(compiled: Callable[..., Any]) -> None:
    given_attributes = {"b": "2", "a": "1"}
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, attributes=given_attributes)
    given_attributes["c"] = "3"
    assert dict(draft.attributes) == {"a": "1", "b": "2"}
    with pytest.raises(TypeError):
        draft.attributes["c"] = "3"  # type: ignore[index]


_VALUES = st.sampled_from([None, "", "a", "é", "日本", "a\x00", "\ud800", 5, _Text("t")])
_KEYS = st.sampled_from(["a", "B", "é", "z", "\x00", "\udc00", "ref_seq", "writer"])


@settings(max_examples=300)
@given(
    saga_id=st.sampled_from(["s", "", "é" * 300, "s\x00", 7, _Text("sub")]),
    event_type=st.sampled_from([EventType.INTENT, EventType.EXECUTED, "INTENT", "NOPE"]),
    texts=st.fixed_dictionaries(
        {}, optional=dict.fromkeys(("tool", "payload", "result", "error", "actor"), _VALUES)
    ),
    attributes=st.one_of(
        st.dictionaries(_KEYS, st.sampled_from(["v", "", "é", "\x00", None, 3]), max_size=4),
        st.just(MappingProxyType({"k": "v"})),
    ),
    recorded_at_us=st.sampled_from([0, -1, 2**63 - 1, 2**63, True, 1.0]),
)
def test_generated_drafts_alike_on_both_paths(
    saga_id: Any,
    event_type: Any,
    texts: dict[str, Any],
    attributes: Any,
    recorded_at_us: Any,
) -> None:
    if COMPILED is None:
        return  # test_a_draft_is_made_or_refused_alike_on_both_paths says why it is skipped
    fields = {
        "saga_id": saga_id,
        "event_type": event_type,
        **texts,
        "attributes": attributes,
        "recorded_at_us": recorded_at_us,
    }
    compiled = _outcome(fields)
    saved = _events._draft_fields
    _events._draft_fields = None
    try:
        assert compiled == _outcome(fields)
    finally:
        _events._draft_fields = saved
