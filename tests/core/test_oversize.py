"""Events written after the tool ran that are too large: journaled without their bulk."""

from __future__ import annotations

import hashlib

from sagacity import EntryDraft, EventType
from sagacity.entries._oversize import CUT_SHORT, ERROR_KEPT, without_bulk


def test_an_executed_result_is_left_out_with_its_digest_and_size() -> None:
    draft = EntryDraft(
        saga_id="s",
        event_type=EventType.EXECUTED,
        tool="export",
        result="ü" * 10,
        attributes={"ref_seq": "2"},
    )
    smaller = without_bulk(draft)
    assert smaller is not None
    assert smaller.result is None
    assert dict(smaller.attributes) == {
        "ref_seq": "2",
        "omitted": "result",
        "omitted_sha256": hashlib.sha256(("ü" * 10).encode()).hexdigest(),
        "omitted_bytes": "20",
    }
    assert smaller.recorded_at_us == draft.recorded_at_us  # the same event, smaller


def test_an_error_is_cut_short_and_a_short_one_is_left_alone() -> None:
    long_error = EntryDraft(saga_id="s", event_type=EventType.SAGA_ENDED, error="e" * 5000)
    smaller = without_bulk(long_error)
    assert smaller is not None
    assert smaller.error is not None
    assert smaller.error == "e" * ERROR_KEPT + CUT_SHORT
    assert smaller.attributes["omitted"] == "error"
    assert smaller.attributes["omitted_bytes"] == "5000"
    assert without_bulk(EntryDraft(saga_id="s", event_type=EventType.FAILED, error="short")) is None


def test_an_intent_is_never_shortened() -> None:
    intent = EntryDraft(saga_id="s", event_type=EventType.INTENT, payload='"' + "x" * 9000 + '"')
    assert without_bulk(intent) is None
