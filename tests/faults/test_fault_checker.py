"""The fault run's checker finds each kind of damage it claims to count (and none in a clean
run), on chains a real saga core wrote: a checker that always said zero would fail here."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench._fault_tools import Shop
from bench.faults import Observed, check
from sagacity import EventType, InMemoryJournal, JournalEntry, Sagacity
from sagacity.producer._reader import SagaRead


def _chains() -> dict[str, list[JournalEntry]]:
    journal = InMemoryJournal()
    agent = Sagacity(journal, compensation="delegated")
    agent.wrap(Shop(None))
    charge, reserve = agent.registry.get("charge"), agent.registry.get("reserve")
    assert charge is not None
    assert reserve is not None

    def ok() -> None:
        charge.wrapped(order="ok", amount=1)
        reserve.wrapped(order="ok", item="chair")

    def failing() -> None:
        ok()
        raise RuntimeError("declined")

    agent.saga("s-ok", ok)
    agent.saga("s-fail", failing)
    return {saga: list(journal.entries(saga)) for saga in ("s-ok", "s-fail")}


def _read(saga: str, entries: list[JournalEntry]) -> SagaRead:
    read = SagaRead(saga_id=saga, partition=0)
    for offset, entry in enumerate(entries):
        read.feed(0, offset, entry)
    return read


def _steps(entries: list[JournalEntry]) -> list[str]:
    return [f"{e.saga_id}:{e.seq}" for e in entries if e.event_type is EventType.EXECUTED]


def _observed(chains: dict[str, list[JournalEntry]], **changes: Any) -> Observed:
    """A clean observation of ``chains``, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "acks": {
            saga: {"saga": saga, "kind": saga[2:], "events": [[e.seq, e.hash] for e in entries]}
            for saga, entries in chains.items()
        },
        "topic": {saga: _read(saga, entries) for saga, entries in chains.items()},
        "archive": Counter(
            (e.saga_id, e.seq, e.hash) for entries in chains.values() for e in entries
        ),
        "effects": Counter(_steps(chains.get("s-fail", []))),
        "calls": Counter(_steps(chains.get("s-fail", []))),
        "wires": Counter(),
    }
    fields.update(changes)
    return Observed(**fields)


@pytest.fixture(scope="module")
def chains() -> dict[str, list[JournalEntry]]:
    found = _chains()
    assert any(e.event_type is EventType.COMPENSATION_REQUESTED for e in found["s-fail"])
    assert len(_steps(found["s-fail"])) == 2
    return found


def _bad(seen: Observed) -> dict[tuple[str, str], list[int]]:
    verdict = check(seen)
    assert not verdict.ok
    return {key: value for key, value in verdict.counts.items() if value != [0, 0]}


def test_a_clean_run_counts_nothing(chains: dict[str, list[JournalEntry]]) -> None:
    verdict = check(_observed(chains))
    assert verdict.ok, verdict.counts
    assert verdict.acked_events == sum(len(c) for c in chains.values())


def test_an_empty_run_is_not_a_pass(chains: dict[str, list[JournalEntry]]) -> None:
    verdict = check(_observed({}))
    assert all(value == [0, 0] for value in verdict.counts.values())
    assert not verdict.ok


def test_an_acknowledged_event_missing_from_the_topic_is_lost(
    chains: dict[str, list[JournalEntry]],
) -> None:
    topic = {saga: _read(saga, entries[:-1]) for saga, entries in chains.items()}
    archive = Counter((e.saga_id, e.seq, e.hash) for c in chains.values() for e in c[:-1])
    assert _bad(_observed(chains, topic=topic, archive=archive)) == {("topic", "lost"): [2, 2]}


def test_an_event_on_the_topic_twice_is_duplicated(
    chains: dict[str, list[JournalEntry]],
) -> None:
    entries = chains["s-ok"]
    topic = {
        "s-ok": _read("s-ok", [*entries[:2], entries[1], *entries[2:]]),
        "s-fail": _read("s-fail", chains["s-fail"]),
    }
    assert _bad(_observed(chains, topic=topic)) == {("topic", "duplicated"): [1, 1]}


def test_an_acknowledged_event_out_of_order_is_reordered(
    chains: dict[str, list[JournalEntry]],
) -> None:
    entries = chains["s-ok"]
    swapped = [entries[0], entries[2], entries[1], *entries[3:]]
    topic = {"s-ok": _read("s-ok", swapped), "s-fail": _read("s-fail", chains["s-fail"])}
    accepted = {(e.seq, e.hash) for e in topic["s-ok"].entries}
    archive = Counter(
        key for key in _observed(chains).archive if key[0] != "s-ok" or key[1:] in accepted
    )
    bad = _bad(_observed(chains, topic=topic, archive=archive))
    assert set(bad) == {("topic", "reordered")}
    assert bad[("topic", "reordered")] == [len(entries) - 2, 1]  # all after the swap


def test_the_archive_missing_or_doubling_an_event_is_counted(
    chains: dict[str, list[JournalEntry]],
) -> None:
    archive = _observed(chains).archive
    first = chains["s-ok"][0]
    archive[(first.saga_id, first.seq, first.hash)] = 0
    archive += Counter()  # drops the zero
    last = chains["s-fail"][-1]
    archive[(last.saga_id, last.seq, last.hash)] += 1
    assert _bad(_observed(chains, archive=archive)) == {
        ("archive", "missing"): [1, 1],
        ("archive", "doubled"): [1, 1],
    }


def test_undos_with_no_effect_or_a_second_one_are_counted(
    chains: dict[str, list[JournalEntry]],
) -> None:
    refund, release = _steps(chains["s-fail"])
    assert _bad(_observed(chains, effects=Counter([refund]))) == {
        ("undo", "called zero times"): [1, 1]
    }
    assert _bad(_observed(chains, effects=Counter([refund, release, release]))) == {
        ("undo", "called twice or more"): [1, 1]
    }
    # A completed saga's step undone: an undo that should never have happened.
    wrong = Counter([refund, release, *_steps(chains["s-ok"])[:1]])
    assert _bad(_observed(chains, effects=wrong)) == {("undo", "called twice or more"): [1, 1]}


def test_a_compensation_not_ended_is_told_from_one_ended_for_a_person(
    chains: dict[str, list[JournalEntry]],
) -> None:
    from sagacity import EntryDraft
    from sagacity.chain import link

    unfinished = "sagas: compensation unfinished"
    for_a_person = "sagas: compensation ended COMPENSATION_FAILED (a person decides)"
    handed_over = chains["s-fail"]  # delegated: it ends COMPENSATION_PENDING
    assert handed_over[-1].result == "COMPENSATION_PENDING"

    def ended(status: str) -> dict[str, list[JournalEntry]]:
        tail = handed_over[-1]
        end = link(
            EntryDraft(saga_id="s-fail", event_type=EventType.SAGA_ENDED, result=status),
            seq=tail.seq + 1,
            prev_hash=tail.hash,
        )
        return {**chains, "s-fail": [*handed_over, end]}

    info = check(_observed(chains)).info
    assert (info.get(unfinished), info.get(for_a_person)) == (1, None)
    info = check(_observed(ended("COMPENSATION_FAILED"))).info
    assert (info.get(unfinished), info.get(for_a_person)) == (None, 1)
    info = check(_observed(ended("COMPENSATED"))).info
    assert (info.get(unfinished), info.get(for_a_person)) == (None, None)
