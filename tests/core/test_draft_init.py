"""``EntryDraft.__init__`` is written out (the journal's hot path makes a draft per event): it
must take exactly the dataclass's fields, keyword-only, with the fields' defaults, and check a
draft as the generated one did (``__post_init__``)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from sagacity import EntryDraft, EventType
from sagacity.entries._events import now_micros
from sagacity.errors import SerializationError


def test_init_takes_exactly_the_fields_keyword_only() -> None:
    parameters = list(inspect.signature(EntryDraft.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == [f.name for f in dataclasses.fields(EntryDraft)]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    required = {f.name for f in dataclasses.fields(EntryDraft) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}  # fmt: skip
    assert {p.name for p in parameters if p.default is inspect.Parameter.empty} == required


def test_omitted_fields_take_the_fields_defaults() -> None:
    before = now_micros()
    draft = EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED)
    after = now_micros()
    for f in dataclasses.fields(EntryDraft):
        if f.name in ("saga_id", "event_type"):
            continue
        if f.name == "recorded_at_us":
            assert before <= draft.recorded_at_us <= after
            continue
        factory: Any = f.default_factory
        default = f.default if f.default is not dataclasses.MISSING else factory()
        assert getattr(draft, f.name) == default, f.name


@pytest.mark.parametrize(
    "bad",
    [
        {"recorded_at_us": None},
        {"recorded_at_us": 2**63},
        {"tool": 5},
        {"payload": "a\x00b"},
        {"attributes": {"k": "\x00"}},
        {"attributes": {1: "v"}},
        {"attributes": [("k", "v")]},
        {"form": 3},
        {"commitments": {"payload": "ab" * 32}},
    ],
)
def test_the_checks_still_run(bad: dict[str, object]) -> None:
    with pytest.raises(SerializationError):
        EntryDraft(saga_id="s", event_type=EventType.INTENT, **bad)  # type: ignore[arg-type]


def test_an_attribute_error_names_its_key() -> None:
    with pytest.raises(SerializationError, match="attribute 'note' must not contain U\\+0000"):
        EntryDraft(saga_id="s", event_type=EventType.INTENT, attributes={"note": "\x00"})
