"""Property tests: any single edit, deletion, insertion or swap inside a chain is detected."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sagacity import GENESIS_HASH, BreakReason, EntryDraft, EventType, JournalEntry, verify
from sagacity.chain import link

SAGA = "prop-saga"

# Journal text: Unicode scalar values without U+0000 (docs/adr/0002-hash-chain.md).
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
optional_texts = st.none() | texts
drafts = st.builds(
    EntryDraft,
    saga_id=st.just(SAGA),
    event_type=st.sampled_from(list(EventType)),
    tool=optional_texts,
    payload=optional_texts,
    result=optional_texts,
    error=optional_texts,
    actor=optional_texts,
    attributes=st.dictionaries(texts, texts, max_size=4),
    recorded_at_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


def build(items: list[EntryDraft]) -> list[JournalEntry]:
    chain: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate(items, start=1):
        entry = link(draft, seq=seq, prev_hash=prev)
        chain.append(entry)
        prev = entry.hash
    return chain


chains = st.lists(drafts, min_size=2, max_size=7).map(build)

EDITABLE = ("event_type", "tool", "payload", "result", "error", "actor", "recorded_at_us")


def _new_value(data: st.DataObject, name: str, old: Any) -> Any:
    if name == "event_type":
        value = data.draw(st.sampled_from(list(EventType)))
    elif name == "recorded_at_us":
        value = data.draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
    elif name == "attributes":
        value = data.draw(st.dictionaries(texts, texts, max_size=4))
    else:
        value = data.draw(optional_texts)
    assume(value != old)
    return value


@settings(max_examples=100, deadline=None)
@given(chains)
def test_untouched_chains_verify(chain: list[JournalEntry]) -> None:
    verdict = verify(chain, saga_id=SAGA)
    assert verdict.ok
    assert verdict.head_seq == len(chain)
    assert verdict.head_hash == chain[-1].hash


@settings(max_examples=120, deadline=None)
@given(chains, st.data())
def test_any_field_edit_is_reported_edited_at_that_seq(
    chain: list[JournalEntry], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(chain) - 1))
    name = data.draw(st.sampled_from((*EDITABLE, "attributes", "hash", "prev_hash")))
    entry = chain[index]
    if name in ("hash", "prev_hash"):
        value = data.draw(st.binary(min_size=32, max_size=32).map(bytes.hex))
        assume(value != getattr(entry, name))
    else:
        value = _new_value(data, name, getattr(entry, name))
    chain[index] = dataclasses.replace(entry, **{name: value})
    verdict = verify(chain, saga_id=SAGA)
    assert not verdict.ok
    assert verdict.bad_seq == index + 1
    if name == "prev_hash" and index == 0:
        assert verdict.reason is BreakReason.WRONG_GENESIS
    else:
        assert verdict.reason is BreakReason.EDITED


@settings(max_examples=100, deadline=None)
@given(chains, st.data())
def test_an_edit_with_a_recomputed_hash_breaks_the_next_link(
    chain: list[JournalEntry], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(chain) - 2))  # the tail is the documented limit
    name = data.draw(st.sampled_from(EDITABLE))
    entry = chain[index]
    edited = dataclasses.replace(entry, **{name: _new_value(data, name, getattr(entry, name))})
    chain[index] = link(edited, seq=entry.seq, prev_hash=entry.prev_hash)
    verdict = verify(chain, saga_id=SAGA)
    assert not verdict.ok
    assert verdict.reason is BreakReason.BROKEN_LINK
    assert verdict.bad_seq == index + 2


@settings(max_examples=100, deadline=None)
@given(chains, st.data())
def test_any_deletion_inside_the_chain_is_a_gap(
    chain: list[JournalEntry], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(chain) - 2))  # a cut tail needs an anchored head
    del chain[index]
    verdict = verify(chain, saga_id=SAGA)
    assert not verdict.ok
    assert verdict.reason is BreakReason.GAP
    assert verdict.bad_seq == index + 1


@settings(max_examples=100, deadline=None)
@given(chains, st.data())
def test_any_swap_is_reported_reordered(chain: list[JournalEntry], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(chain) - 2))
    j = data.draw(st.integers(i + 1, len(chain) - 1))
    chain[i], chain[j] = chain[j], chain[i]
    verdict = verify(chain, saga_id=SAGA)
    assert not verdict.ok
    assert verdict.reason is BreakReason.REORDERED
    assert verdict.bad_seq == i + 1


@settings(max_examples=100, deadline=None)
@given(chains, drafts, st.data())
def test_a_forged_entry_linked_into_the_chain_is_detected(
    chain: list[JournalEntry], forged: EntryDraft, data: st.DataObject
) -> None:
    # The forger links a well-formed entry after entry `index` and slips it in before the
    # real successor (insertion at the very end is an ordinary append).
    index = data.draw(st.integers(-1, len(chain) - 2))
    prev = chain[index].hash if index >= 0 else GENESIS_HASH
    entry = link(forged, seq=index + 2, prev_hash=prev)
    chain.insert(index + 1, entry)
    verdict = verify(chain, saga_id=SAGA)
    assert not verdict.ok
    assert verdict.reason is BreakReason.REORDERED
    assert verdict.bad_seq == index + 3


@settings(max_examples=100, deadline=None)
@given(chains, drafts, st.data())
def test_any_inserted_entry_is_detected(
    chain: list[JournalEntry], forged: EntryDraft, data: st.DataObject
) -> None:
    position = data.draw(st.integers(0, len(chain) - 1))
    seq = data.draw(st.integers(1, len(chain) + 3))
    prev = data.draw(st.sampled_from([GENESIS_HASH, *(e.hash for e in chain)]))
    chain.insert(position, link(forged, seq=seq, prev_hash=prev))
    assert not verify(chain, saga_id=SAGA).ok


@settings(max_examples=100, deadline=None)
@given(chains, st.data())
def test_an_entry_of_another_saga_is_foreign(
    chain: list[JournalEntry], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(chain) - 1))
    other = data.draw(texts.filter(lambda s: s not in ("", SAGA)))
    chain[index] = dataclasses.replace(chain[index], saga_id=other)
    verdict = verify(chain, saga_id=SAGA)
    assert verdict.reason is BreakReason.FOREIGN_SAGA
    assert verdict.bad_seq == index + 1
