"""Chain form 2 (docs/adr/0019-erasure.md §1): salted commitments, erasure keeps the link."""

from __future__ import annotations

import dataclasses

import pytest

from sagacity import GENESIS_HASH, EntryDraft, EventType, JournalEntry, verify
from sagacity.chain import canonical_bytes, committing, link, payload_sha256
from sagacity.errors import SerializationError

PAYLOAD = '{"email":"ada@example.org","marker":"MARKER-1"}'


def _chain() -> list[JournalEntry]:
    drafts = [
        EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED),
        EntryDraft(
            saga_id="s",
            event_type=EventType.INTENT,
            tool="send",
            payload=PAYLOAD,
            attributes={"payload_sha256": payload_sha256(PAYLOAD)},
        ),
        EntryDraft(
            saga_id="s",
            event_type=EventType.EXECUTED,
            tool="send",
            result="sent",
            attributes={"ref_seq": "2", "undo_arguments": '{"id":1}'},
        ),
    ]
    out: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate(drafts, start=1):
        entry = link(committing(draft), seq=seq, prev_hash=prev)
        out.append(entry)
        prev = entry.hash
    return out


def _erased(entry: JournalEntry) -> JournalEntry:
    attributes = {k: v for k, v in entry.attributes.items() if k != "undo_arguments"}
    return dataclasses.replace(
        entry, payload=None, result=None, error=None, attributes=attributes, salts={}
    )


def test_a_committed_chain_verifies_opened_and_erased() -> None:
    chain = _chain()
    assert verify(chain).ok
    erased = [_erased(e) for e in chain]
    assert all(e.payload is None and not e.salts for e in erased)
    assert [e.hash for e in erased] == [e.hash for e in chain]
    assert verify(erased).ok
    # The approval binding stays the exact payload's SHA-256, in clear.
    assert erased[1].attributes["payload_sha256"] == payload_sha256(PAYLOAD)


def test_the_form_2_bytes_hold_no_data() -> None:
    entry = _chain()[1]
    assert canonical_bytes(entry, seq=2).startswith(b"SGC2")
    assert b"MARKER-1" not in canonical_bytes(entry, seq=2)


def test_salts_are_fresh_per_entry_and_field() -> None:
    one, two = _chain()[1], _chain()[1]
    assert one.salts["payload"] != two.salts["payload"]
    assert one.commitments["payload"] != two.commitments["payload"]


def test_an_opening_changed_after_the_fact_is_an_edit() -> None:
    chain = _chain()
    chain[1] = dataclasses.replace(chain[1], payload=PAYLOAD.replace("ada", "bob"))
    verdict = verify(chain)
    assert not verdict.ok
    assert (verdict.reason, verdict.bad_seq) == ("edited", 2)


def test_bad_input_is_refused_with_a_clear_error() -> None:
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, payload="x")
    with pytest.raises(SerializationError, match="unknown chain form"):
        dataclasses.replace(draft, form=3)
    with pytest.raises(SerializationError, match="not a data field"):
        dataclasses.replace(draft, form=2, salts={"actor": "00" * 32})
    with pytest.raises(SerializationError, match="64 hex digits"):
        dataclasses.replace(draft, form=2, salts={"payload": "00"})
    with pytest.raises(SerializationError, match="no salt"):
        link(dataclasses.replace(draft, form=2), seq=1, prev_hash=GENESIS_HASH)
    with pytest.raises(SerializationError, match="already in form 2"):
        committing(committing(draft))
