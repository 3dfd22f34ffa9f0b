"""The saga grammar's compiled twin (``native/src/grammar.rs``), which ``verify``'s compiled
path advances on the rows it streams, held to the grammar (:mod:`sagacity.chain._grammar`).

The twin decides only that a story is clean; any other saga's story is told by the grammar.
So the property that matters is: it never finds clean a story the grammar does not.  It is
checked here two ways: on every case of ``tests/vectors/grammar-v1.json`` it gives the case's
findings (rule and seq), or leaves the story to the grammar, and only where it does not model
what the story holds (an ``ERASED``, an event type it does not know); on random stories (any
event type, references forward, backward and damaged, gated tools, grants, suspects, ends of
every status) its findings are the grammar's wherever it gives any.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagacity.chain._fastverify import NATIVE
from sagacity.chain._grammar import Row, check
from sagacity.entries._events import EventType

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "grammar-v1.json").read_text(encoding="utf-8"))
CASES = {case["name"]: case for case in VECTORS["cases"]}

if NATIVE:
    from sagacity import _sagacity_native as compiled  # type: ignore[attr-defined]

pytestmark = pytest.mark.skipif(
    not NATIVE, reason="the compiled module is off (SAGACITY_NATIVE=0) or not installed"
)


def _event(e: dict[str, Any]) -> tuple[Any, ...]:
    return (
        e["seq"],
        e["event_type"],
        e["tool"],
        e["actor"],
        dict(e["attributes"] or {}),
        e["payload"],
        e["result"],
    )


def _left_to_the_grammar(case: dict[str, Any]) -> bool:
    known = {t.value for t in EventType}
    return any(e["event_type"] == "ERASED" or e["event_type"] not in known for e in case["events"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_twin_reads_every_case(name: str) -> None:
    case = CASES[name]
    got = compiled.grammar_findings(
        [_event(e) for e in case["events"]], after_seq=case["after_seq"]
    )
    if got is None:
        assert _left_to_the_grammar(case), name
    else:
        assert not _left_to_the_grammar(case), name
        assert [[rule, seq] for rule, seq in got] == case["findings"]


def test_the_twin_judges_most_cases_itself() -> None:
    judged = [
        n
        for n, c in CASES.items()
        if compiled.grammar_findings([_event(e) for e in c["events"]], after_seq=c["after_seq"])
        is not None
    ]
    assert len(judged) >= 55


def test_the_twin_knows_the_event_types_the_core_knows() -> None:
    assert list(compiled.GRAMMAR_EVENT_TYPES) == [t.value for t in EventType]


def test_the_twin_names_the_rules_by_the_cores_names() -> None:
    """The compiled file naming grammar rules is this one twin, and its names are the core's
    (a rule added to the core and not to the twin fails the random stories below, and here)."""
    from sagacity.chain._grammar import GrammarRule

    namers = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "native" / "src").rglob("*.rs")
        if re.search(r'"grammar:[a-z]', path.read_text(encoding="utf-8"))
    }
    assert namers == {"native/src/grammar.rs"}
    text = (ROOT / "native" / "src" / "grammar.rs").read_text(encoding="utf-8")
    named = set(re.findall(r'"(grammar:[a-z_]+)"', text))
    # ERASED_WHILE_LIVE is the grammar's alone: the twin leaves every ERASED to it.
    assert named == {r.value for r in GrammarRule} - {GrammarRule.ERASED_WHILE_LIVE.value}


_KINDS = [t.value for t in EventType if t is not EventType.ERASED]
_ENDS = [None, "", "COMPLETED", "COMPENSATED", "REJECTED", "EXPIRED", "COMPENSATION_PENDING",
         "COMPENSATION_FAILED", "AWAITING_APPROVAL", "SOMETHING"]  # fmt: skip
_INTS = ["0", "1", "2", "-1", "+2", " 3 ", "\t4", "x", "", "99999999999999999999999", "2\u00a0"]


@st.composite
def _story(draw: Any) -> tuple[int, list[Row]]:
    after_seq = draw(st.sampled_from([0, 0, 0, 3]))
    length = draw(st.integers(min_value=1, max_value=14))
    events = []
    for seq in range(after_seq + 1, after_seq + length + 1):
        rare = draw(st.integers(min_value=0, max_value=19)) == 0
        kind = draw(st.sampled_from(["ERASED", "FUTURE_EVENT"] if rare else _KINDS))
        attributes: dict[str, str] = {}
        ref = draw(
            st.one_of(
                st.none(),
                st.integers(min_value=max(after_seq - 1, 0), max_value=seq + 1).map(str),
                st.sampled_from(_INTS),
            )
        )
        if ref is not None:
            attributes["ref_seq"] = ref
        for key, values in (
            ("reversibility", ["IRREVERSIBLE", "PRIVILEGED", "READ", "COMPENSATABLE", "x"]),
            ("signatures_required", _INTS),
            ("grant_seq", [str(s) for s in range(max(after_seq, 1), seq + 1)] + _INTS),
            ("grant_id", ["g1", "g2", ""]),
            ("compensation", ["delegated", "inline"]),
            ("phase", ["call", "undo"]),
            ("outcome", ["executed", "not_executed"]),
            ("refused", ["true"]),
            ("writer", ["w1"]),
        ):
            if draw(st.integers(min_value=0, max_value=3)) == 0:
                attributes[key] = draw(st.sampled_from(values))
        events.append(
            Row(
                seq=seq,
                event_type=kind,
                tool=draw(st.sampled_from([None, "a", "b"])),
                actor=draw(st.sampled_from([None, "", "x", "y"])),
                attributes=attributes,
                payload=draw(st.sampled_from([None, "p", "q"])),
                result=draw(st.sampled_from(_ENDS)),
            )
        )
    return after_seq, events


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_story())
def test_the_twin_finds_what_the_grammar_finds_on_random_stories(
    story: tuple[int, list[Row]],
) -> None:
    after_seq, events = story
    expected = [(f.rule.value, f.seq) for f in check(events, after_seq=after_seq)]
    got = compiled.grammar_findings([tuple(e) for e in events], after_seq=after_seq)
    if got is not None:
        assert got == expected
    else:
        # Left to the grammar only for what the twin does not model.
        assert any(
            e.event_type in ("ERASED", "FUTURE_EVENT")
            or any(not v.isascii() for v in e.attributes.values())
            for e in events
        )
