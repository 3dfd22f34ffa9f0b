"""The canonical form from plain field values (``canonical_bytes_of``, ``hash_of``) is byte for
byte the reference's (``canonical_bytes``, ``compute_hash``): on the frozen vectors and on
generated entries (every text kind, None fields, attributes, extreme ints)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.chain import canonical_bytes, canonical_bytes_of, compute_hash, hash_of, link
from sagacity.entries._events import UnknownEventType
from sagacity.errors import SerializationError

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests/vectors/chain-v1.json").read_text(encoding="utf-8"))

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
optional_texts = st.none() | texts
event_types = st.sampled_from(list(EventType)) | st.sampled_from(
    [UnknownEventType("FUTURE_KIND"), UnknownEventType("späť-𝄞")]
)
drafts = st.builds(
    EntryDraft,
    saga_id=texts.filter(bool),
    event_type=event_types,
    tool=optional_texts,
    payload=optional_texts,
    result=optional_texts,
    error=optional_texts,
    actor=optional_texts,
    attributes=st.dictionaries(texts, texts, max_size=6),
    recorded_at_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


def fields(entry: EntryDraft, seq: int) -> bytes:
    return canonical_bytes_of(
        entry.saga_id,
        seq,
        entry.event_type.value,
        entry.tool,
        entry.payload,
        entry.result,
        entry.error,
        entry.actor,
        entry.recorded_at_us,
        # As a reader holds them: a plain dict in any order (here reversed).
        dict(reversed(list(entry.attributes.items()))),
    )


@settings(max_examples=400, deadline=None)
@given(draft=drafts, seq=st.integers(min_value=1, max_value=2**63 - 1))
def test_canonical_bytes_from_fields_equal_the_reference(draft, seq):
    assert fields(draft, seq) == canonical_bytes(draft, seq=seq)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(drafts, min_size=1, max_size=5))
def test_hash_from_fields_equals_compute_hash_along_a_chain(items):
    prev = GENESIS_HASH
    for seq, draft in enumerate(items, start=1):
        entry = link(draft, seq=seq, prev_hash=prev)
        assert hash_of(bytes.fromhex(prev), fields(entry, seq)) == compute_hash(
            prev, entry, seq=seq
        )
        assert hash_of(bytes.fromhex(prev), fields(entry, seq)) == entry.hash
        prev = entry.hash


def test_the_frozen_vectors():
    count = 0
    for chain in VECTORS["chains"]:
        for raw in chain["entries"]:
            entry = JournalEntry.from_dict(raw)
            canonical = canonical_bytes_of(
                raw["saga_id"],
                raw["seq"],
                raw["event_type"],
                raw["tool"],
                raw["payload"],
                raw["result"],
                raw["error"],
                raw["actor"],
                raw["recorded_at_us"],
                raw["attributes"],
            )
            assert canonical == canonical_bytes(entry, seq=entry.seq)
            assert canonical.hex() == raw["canonical_hex"]
            assert hash_of(bytes.fromhex(raw["prev_hash"]), canonical) == raw["hash"]
            count += 1
    assert count >= 5


def test_attributes_are_sorted_by_utf8_bytes_and_none_means_empty():
    # jsonb hands keys back shortest first; the form sorts by bytes.
    attributes = {"b": "1", "aa": "2", "é": "3", "\U0001d11e": "4", "z": ""}
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, attributes=attributes)
    args = ("s", 7, "INTENT", None, None, None, None, None, draft.recorded_at_us)
    assert canonical_bytes_of(*args, attributes) == canonical_bytes(draft, seq=7)
    empty = EntryDraft(saga_id="s", event_type=EventType.INTENT, recorded_at_us=args[-1])
    assert canonical_bytes_of(*args, None) == canonical_bytes_of(*args, {})
    assert canonical_bytes_of(*args, None) == canonical_bytes(empty, seq=7)


def test_out_of_range_values_are_refused_like_the_reference():
    args = ["s", 1, "INTENT", None, None, None, None, None, 0, None]
    for index, value in ((1, 2**63), (8, -(2**63) - 1)):
        bad = list(args)
        bad[index] = value
        with pytest.raises(Exception) as caught:
            canonical_bytes_of(*bad)
        if index == 8:
            # No draft holds a time beyond 64 bits: it is refused where it is made.
            with pytest.raises(SerializationError, match="64 bits"):
                EntryDraft(saga_id="s", event_type=EventType.INTENT, recorded_at_us=bad[8])
            continue
        draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, recorded_at_us=bad[8])
        with pytest.raises(type(caught.value)):
            canonical_bytes(draft, seq=bad[1])
    with pytest.raises(AttributeError):
        canonical_bytes_of(*args[:9], {"ref_seq": 2})  # type: ignore[dict-item]
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes_of("\ud800", *args[1:])


def test_hash_of_needs_a_32_byte_previous_digest():
    canonical = canonical_bytes_of("s", 1, "INTENT", None, None, None, None, None, 0, None)
    with pytest.raises(SerializationError):
        hash_of(b"\x00" * 31, canonical)
    assert hash_of(b"\x00" * 32, canonical) == hashlib.sha256(b"\x00" * 32 + canonical).hexdigest()


def test_linking_copies_every_field_of_the_draft() -> None:
    """The link step copies a draft field by field (``_events._copy_draft``): a field added
    to ``EntryDraft`` must be copied too, or linked entries would lose it."""
    import dataclasses

    from sagacity.entries import _events

    assert tuple(f.name for f in dataclasses.fields(EntryDraft)) == _events._COPIED
    draft = EntryDraft(
        saga_id="s",
        event_type=EventType.EXECUTED,
        tool="t",
        payload="p",
        result="r",
        error="e",
        actor="a",
        attributes={"k": "v"},
        recorded_at_us=5,
    )
    entry = link(draft, seq=2, prev_hash=GENESIS_HASH)
    for f in dataclasses.fields(EntryDraft):
        assert getattr(entry, f.name) == getattr(draft, f.name), f.name
