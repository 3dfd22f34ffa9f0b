"""The archiver's check of an event from its Avro record's fields agrees with the reference
path (decode to a JournalEntry, compute_hash): same acceptance, same row, and every refusal
left to the reference path, on generated entries and on records no JournalEntry could make."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import fastavro
import pytest
from archive_helpers import BASE_US, as_raw, make_chain, rows
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity._events import GENESIS_HASH, EntryDraft, EventType, UnknownEventType
from sagacity.chain import canonical_layout, hash_of, link
from sagacity.consumers.archive import BatchArchiver, QuarantineReason, RawEvent
from sagacity.consumers.archive._ingest import (
    _avro_record_decoder,
    _checked_from_record,
    _journal_row,
    _Refusal,
)
from sagacity.schemas import encode_entry
from sagacity.schemas._codec import MAGIC, current_schema, entry_record

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
optional_texts = st.none() | texts
drafts = st.builds(
    EntryDraft,
    saga_id=texts.filter(bool),
    event_type=st.sampled_from([*EventType, UnknownEventType("FUTURE_KIND")]),
    tool=optional_texts,
    payload=optional_texts,
    result=optional_texts,
    error=optional_texts,
    actor=optional_texts,
    attributes=st.dictionaries(texts, texts, max_size=5),
    # Mostly inside the archive's range, sometimes outside it (refused as bad_time).
    recorded_at_us=st.integers(min_value=-(10**6), max_value=253_402_300_800_000_000 + 10**6)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1),
)

REFERENCE = BatchArchiver("host=unused", consumer_group="g", decode=lambda b: _decode(b))


def _decode(data: bytes):
    from sagacity.schemas import decode_entry

    return decode_entry(data)


def both(ev: RawEvent) -> tuple[tuple[Any, ...] | None, Any]:
    """(the record path's row or None, the reference path's row or refusal)."""
    checked = _checked_from_record(ev, _avro_record_decoder())
    reference = REFERENCE._decode_entry(ev)
    if not isinstance(reference, _Refusal):
        reference = _journal_row(reference, ev.topic, ev.partition, ev.offset)
    return (None if checked is None else checked.row), reference


def same_row(fast: tuple[Any, ...], reference: tuple[Any, ...]) -> None:
    # The attributes are jsonb: the same object, whatever order its text lists keys in.
    assert fast[:8] == reference[:8]
    assert fast[9:] == reference[9:]
    assert json.loads(fast[8]) == json.loads(reference[8])


@settings(max_examples=300, deadline=None)
@given(draft=drafts, seq=st.integers(min_value=1, max_value=2**63 - 1), edit=st.booleans())
def test_generated_events_are_judged_alike(draft, seq, edit):
    entry = link(draft, seq=seq, prev_hash=GENESIS_HASH)
    if edit:
        entry = dataclasses.replace(entry, payload=(entry.payload or "") + "!")
    key = entry.saga_id.encode()
    ev = RawEvent(topic="t", partition=3, offset=seq, key=key, value=encode_entry(entry))
    fast, reference = both(ev)
    if isinstance(reference, _Refusal):
        assert fast is None
        assert reference.reason in {QuarantineReason.EDITED, QuarantineReason.BAD_TIME}
    else:
        assert fast is not None
        same_row(fast, reference)
    # Keyed as another saga: never accepted.
    foreign = dataclasses.replace(ev, key=key + b"x")
    assert both(foreign)[0] is None


def raw_record(**changes: Any) -> bytes:
    """A message value written straight from a record, bypassing JournalEntry's checks."""
    good = make_chain("s", 2)[1]
    record = {**entry_record(good), **changes}
    if "hash" not in changes and "prev_hash" not in changes:
        # Hashed over the changed fields: only the entry rules, not the hash, can refuse it.
        # The form's layout without its checks (canonical_bytes_of refuses these records).
        text = ("tool", "payload", "result", "error", "actor")
        canonical = canonical_layout(
            record["saga_id"].encode(),
            record["seq"],
            record["event_type"].encode(),
            *(None if record[k] is None else record[k].encode() for k in text),
            record["recorded_at_us"],
            sorted((k.encode(), v.encode()) for k, v in (record["attributes"] or {}).items()),
        )
        record["hash"] = hash_of(bytes.fromhex(record["prev_hash"]), canonical)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, current_schema().schema, record)
    return MAGIC + current_schema().fingerprint + buf.getvalue()


BAD_RECORDS = {
    "nul_in_payload": {"payload": "a\x00b"},
    "nul_in_saga_id": {"saga_id": "s\x00"},
    "nul_in_attribute_key": {"attributes": {"k\x00": "v"}},
    "nul_in_attribute_value": {"attributes": {"k": "\x00"}},
    "nul_in_unknown_event_type": {"event_type": "NEW\x00"},
    "empty_saga_id": {"saga_id": ""},
    "empty_event_type": {"event_type": ""},
    "seq_zero": {"seq": 0},
    "prev_hash_not_hex": {"prev_hash": "zz" * 32},
    "prev_hash_short": {"prev_hash": "00" * 31},
    "hash_upper_case": {"hash": make_chain("s", 2)[1].hash.upper()},
    "time_before_1970": {"recorded_at_us": -1},
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_records_that_are_not_valid_entries_are_left_to_the_reference(case):
    changes = BAD_RECORDS[case]
    saga = changes.get("saga_id", "s")
    ev = RawEvent(topic="t", partition=0, offset=1, key=saga.encode(), value=raw_record(**changes))
    fast, reference = both(ev)
    assert fast is None
    assert isinstance(reference, _Refusal)


def test_the_unchanged_record_is_accepted_alike():
    ev = RawEvent(topic="t", partition=0, offset=1, key=b"s", value=raw_record())
    fast, reference = both(ev)
    assert fast is not None
    same_row(fast, reference)


@pytest.mark.postgres
def test_a_mixed_batch_gives_the_same_reports_and_rows_on_both_paths(pg_dsn):
    """Valid events, redeliveries, forks, gaps, edits and invalid records in one batch."""
    from psycopg import connect
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from sagacity.consumers.archive import migrate

    chain = make_chain("saga-a", 5) + make_chain("saga-b", 3, start_us=BASE_US + 17)
    fork = dataclasses.replace(chain[2], payload="forked")
    fork = link(fork, seq=3, prev_hash=chain[1].hash)
    edited = dataclasses.replace(chain[6], result="edited")
    events = as_raw([*chain[:3], chain[5], chain[1], fork, chain[6], edited, chain[3]])
    extra = [
        RawEvent(topic="t", partition=0, offset=100 + i, key=b"s", value=raw_record(**c))
        for i, c in enumerate(BAD_RECORDS.values())
    ]
    outcomes = []
    for mode in ("record", "entry"):
        params = conninfo_to_dict(pg_dsn)
        with connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS paths_{mode} CASCADE")
            conn.execute(f"CREATE SCHEMA paths_{mode}")
        params["options"] = f"-c search_path=paths_{mode}"
        dsn = make_conninfo(**params)
        with connect(dsn, autocommit=True) as conn:
            migrate(conn)
        archiver = BatchArchiver(
            dsn, consumer_group="g", decode=None if mode == "record" else _decode
        )
        reports = [archiver.archive(events[:5]), archiver.archive(events[5:] + extra)]
        archiver.close()
        outcomes.append(
            (
                [(r.archived, r.duplicates, r.quarantined) for r in reports],
                rows(
                    dsn,
                    "SELECT saga_id, seq, event_type, tool, payload, result, error, actor,"
                    " attributes, recorded_at_us, hash, prev_hash, kafka_offset"
                    " FROM side_effect_journal ORDER BY saga_id, seq",
                ),
                rows(
                    dsn,
                    "SELECT reason, detail, saga_id, seq, kafka_offset FROM archive_quarantine"
                    " ORDER BY kafka_offset, reason",
                ),
                rows(dsn, "SELECT saga_id, head_seq, head_hash FROM archive_saga_head ORDER BY 1"),
                rows(
                    dsn, "SELECT topic, kafka_partition, next_offset FROM archive_consumer_offset"
                ),
            )
        )
        with connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA paths_{mode} CASCADE")
    assert outcomes[0] == outcomes[1]
    (first, second), journal, quarantine, heads, _ = outcomes[0]
    assert first == (4, 1, {})  # saga-a 1..3, saga-b 1; the second saga-a 2 is a redelivery
    archived, duplicates, quarantined = second
    assert (archived, duplicates) == (2, 0)  # saga-b seq 2, saga-a seq 4
    assert quarantined[QuarantineReason.FORK] == 1
    assert quarantined[QuarantineReason.BAD_TIME] == 1
    assert quarantined[QuarantineReason.EDITED] == 4  # one edit, three unhashable records
    assert quarantined[QuarantineReason.UNDECODABLE] == 8
    assert len(quarantine) == 2 + len(BAD_RECORDS)
    assert len(journal) == 6
    assert heads == [("saga-a", 4, chain[3].hash), ("saga-b", 2, chain[6].hash)]
