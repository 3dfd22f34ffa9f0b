"""The archiver's check of an event from its Avro record's fields agrees with the reference
path (decode to a JournalEntry, compute_hash): same acceptance, same row, and every refusal
left to the reference path, on generated entries and on records no JournalEntry could make."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import fastavro
import pytest
from archive_helpers import BASE_US, as_raw, make_chain, rows
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity.chain import canonical_layout, hash_of, link
from sagacity.consumers.archive import BatchArchiver, QuarantineReason, RawEvent
from sagacity.consumers.archive._ingest import (
    _checked_from_record,
    _journal_row,
    _native_archive_row,
    _Refusal,
)
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, UnknownEventType
from sagacity.postgres.archive import PostgresArchiveAudits, PostgresArchiveIngest
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE, MAGIC, current_schema, encode_entry, entry_record

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

REFERENCE = BatchArchiver(
    PostgresArchiveIngest("host=unused"),
    consumer_group="g",
    decode=lambda b: _decode(b),
    partitioner=KAFKA_PARTITIONER,
    wire=JOURNAL_WIRE,
)


def _decode(data: bytes):
    from sagacity.schemas import decode_entry

    return decode_entry(data)


def both(ev: RawEvent) -> tuple[tuple[Any, ...] | None, Any]:
    """(the record path's row or None, the reference path's row or refusal)."""
    checked = _checked_from_record(ev, JOURNAL_WIRE.record)
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

    from sagacity.postgres.archive import migrate

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
            PostgresArchiveIngest(dsn),
            consumer_group="g",
            decode=None if mode == "record" else _decode,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
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


# --- the compiled check (sagacity_native.archive_row) against the record path -------------

NATIVE_ROW = _native_archive_row()
PREFIX = MAGIC + current_schema().fingerprint


def _native_or_skip() -> Any:
    if NATIVE_ROW is None:
        # test_the_compiled_check_is_built_where_cargo_is fails where the module should be.
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not installed")
    return NATIVE_ROW


def native_and_record(ev: RawEvent) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """(the compiled check's row or None, the record path's row or None), asserted to agree:
    the compiled check accepts only what the record path accepts, with the same row."""
    native = _native_or_skip()(PREFIX, ev.key, ev.value, ev.topic, ev.partition, ev.offset)
    checked = _checked_from_record(ev, JOURNAL_WIRE.record)
    record = None if checked is None else checked.row
    if native is not None:
        assert native == record
    return native, record


def test_the_compiled_check_is_built_where_cargo_is() -> None:
    wanted = os.environ.get("SAGACITY_NATIVE", "1") != "0"
    cargo = shutil.which("cargo") or (Path.home() / ".cargo" / "bin" / "cargo").exists()
    if wanted and cargo:
        assert NATIVE_ROW is not None, "cargo is here but sagacity-native has no archive_row"
    if not wanted:
        assert NATIVE_ROW is None


@settings(max_examples=300, deadline=None)
@given(draft=drafts, seq=st.integers(min_value=1, max_value=2**62 - 1), edit=st.booleans())
def test_the_compiled_check_accepts_what_the_record_path_accepts(draft, seq, edit):
    entry = link(draft, seq=seq, prev_hash=GENESIS_HASH)
    if edit:
        entry = dataclasses.replace(entry, payload=(entry.payload or "") + "!")
    ev = RawEvent(
        topic="t", partition=3, offset=seq, key=entry.saga_id.encode(), value=encode_entry(entry)
    )
    native, record = native_and_record(ev)
    # Every valid entry of the current schema is the compiled check's (not left to Python).
    assert (native is None) == (record is None)
    foreign = dataclasses.replace(ev, key=ev.key + b"x")
    assert native_and_record(foreign) == (None, None)


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_the_compiled_check_refuses_records_that_are_not_entries(case):
    changes = BAD_RECORDS[case]
    saga = changes.get("saga_id", "s")
    ev = RawEvent(topic="t", partition=0, offset=1, key=saga.encode(), value=raw_record(**changes))
    assert native_and_record(ev) == (None, None)


def _avro_long(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _avro_string(text: str) -> bytes:
    data = text.encode()
    return _avro_long(len(data)) + data


FORM_1_TAIL = b"\x02\x00\x00\x00"
"""Schema v2's end of a form-1 event: ``form`` 1, no commitments, salts or sealed fields."""


def _message(attributes: bytes, *, header: bytes = PREFIX, tail: bytes = b"") -> bytes:
    """A message written by hand (``attributes``: the map's encoded blocks), hashed over
    attributes {"k": "v"}, ending as a form-1 event does, then ``tail``."""
    good = make_chain("s", 2)[1]
    draft = EntryDraft(
        saga_id="s", event_type=EventType.INTENT, attributes={"k": "v"}, recorded_at_us=BASE_US
    )
    entry = link(draft, seq=2, prev_hash=good.prev_hash)
    body = (
        _avro_long(1)
        + _avro_string("s")
        + _avro_long(2)
        + _avro_string("INTENT")
        + b"\x00" * 5
        + _avro_long(BASE_US)
        + attributes
        + _avro_string(entry.prev_hash)
        + _avro_string(entry.hash)
        + FORM_1_TAIL
    )
    return header + body + tail


ENCODINGS = {
    # name: (value, accepted by the record path)
    "plain": (_message(b"\x02" + _avro_string("k") + _avro_string("v") + b"\x00"), True),
    "negative_block_count": (
        _message(b"\x01" + _avro_long(4) + _avro_string("k") + _avro_string("v") + b"\x00"),
        True,
    ),
    "key_written_twice": (
        _message(b"\x04" + (_avro_string("k") + _avro_string("v")) * 2 + b"\x00"),
        True,
    ),
    "overlong_length": (_message(b"\x02\x82\x00k" + _avro_string("v") + b"\x00"), True),
    "trailing_byte": (
        _message(b"\x02" + _avro_string("k") + _avro_string("v") + b"\x00", tail=b"\x00"),
        False,
    ),
    "other_schema": (
        _message(
            b"\x02" + _avro_string("k") + _avro_string("v") + b"\x00", header=MAGIC + b"\x00" * 8
        ),
        False,
    ),
    "truncated": (_message(b"\x02" + _avro_string("k"))[:-3], False),
}


@pytest.mark.parametrize("case", sorted(ENCODINGS))
def test_the_compiled_check_on_hand_written_encodings(case):
    value, accepted = ENCODINGS[case]
    native, record = native_and_record(
        RawEvent(topic="t", partition=0, offset=1, key=b"s", value=value)
    )
    assert (record is not None) == accepted
    if case == "plain":
        assert native is not None


def test_no_flipped_bit_is_accepted_by_the_compiled_check_alone():
    # Every single-bit change of a valid message: the compiled check accepts it only where the
    # record path does, with the same row (native_and_record asserts it).
    entry = make_chain("saga-é", 3)[2]
    entry = link(
        dataclasses.replace(entry, attributes={"q": 'a "quoted" \\ \n\t\x01 ✓'}, tool="t"),
        seq=3,
        prev_hash=entry.prev_hash,
    )
    value = encode_entry(entry)
    key = entry.saga_id.encode()
    accepted = set()
    for i in range(len(value) * 8):
        flipped = bytearray(value)
        flipped[i // 8] ^= 1 << (i % 8)
        native, _ = native_and_record(
            RawEvent(topic="t", partition=0, offset=1, key=key, value=bytes(flipped))
        )
        if native is not None:
            accepted.add(i // 8)
    assert native_and_record(RawEvent(topic="t", partition=0, offset=1, key=key, value=value))[0]
    # The hash covers every field but schema_version (the byte after the prefix, which is not
    # part of the entry), and the prefix picks the schema.
    assert accepted == {len(PREFIX)}


# --- chain form 2 (docs/adr/0019-erasure.md): the compiled check hands it to Python ----------


@pytest.mark.postgres
def test_a_sealed_form_2_event_is_archived_alike_with_and_without_the_compiled_module(
    pg_dsn, monkeypatch
):
    """Sealed form-2 events (opened with the key service), an unsealed form-2 event, an
    altered sealed one and a form-1 chain: the same rows, commitments, salts, quarantine and
    heads whether the compiled check runs or not, since it hands every form-2 or sealed event
    back to the Python path; the audit, bulk or not, passes both archives."""
    from psycopg import connect
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from sagacity.chain import committing
    from sagacity.consumers.archive import iter_audits
    from sagacity.postgres.archive import _audits, migrate
    from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
    from sagacity.privacy._keys import KeyService
    from sagacity.schemas import decode_record
    from sagacity.schemas._sealed import encode_sealed
    from sagacity.testing import InMemoryKeyStore

    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    sealed: list[Any] = []
    prev = GENESIS_HASH
    for entry in make_chain("sealed-n", 4):
        sealed.append(link(committing(dataclasses.replace(entry)), seq=entry.seq, prev_hash=prev))
        prev = sealed[-1].hash
    values = [encode_sealed(e, keys) for e in sealed[:3]] + [encode_entry(sealed[3])]
    box = decode_record(values[2])["sealed"]["payload"]
    altered = bytearray(values[2])
    altered[values[2].index(box) + 3] ^= 1
    events = [
        *[
            RawEvent(topic="t", partition=0, offset=i, key=b"sealed-n", value=v)
            for i, v in enumerate(values[:2])
        ],
        RawEvent(topic="t", partition=0, offset=2, key=b"sealed-n", value=bytes(altered)),
        RawEvent(topic="t", partition=0, offset=3, key=b"sealed-n", value=values[2]),
        RawEvent(topic="t", partition=0, offset=4, key=b"sealed-n", value=values[3]),
        *as_raw(make_chain("plain-n", 3), partition=1),
    ]
    if NATIVE_ROW is not None:
        # Every form-2 message, sealed or not, is handed back; form 1 is taken.
        for ev in events:
            got = NATIVE_ROW(PREFIX, ev.key, ev.value, ev.topic, ev.partition, ev.offset)
            assert (got is None) == (ev.key == b"sealed-n"), ev
    streamed: list[bool] = []
    stream_class = _audits.RowStream

    def counted(*args: Any, **kwargs: Any) -> Any:
        streamed.append(kwargs["forms"])
        return stream_class(*args, **kwargs)

    monkeypatch.setattr(_audits, "RowStream", counted)
    outcomes = []
    for mode in ("compiled", "python"):
        monkeypatch.setenv(
            "SAGACITY_NATIVE",
            os.environ.get("SAGACITY_NATIVE", "1") if mode == "compiled" else "0",
        )
        params = conninfo_to_dict(pg_dsn)
        with connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS sealed_{mode} CASCADE")
            conn.execute(f"CREATE SCHEMA sealed_{mode}")
        params["options"] = f"-c search_path=sealed_{mode}"
        dsn = make_conninfo(**params)
        with connect(dsn, autocommit=True) as conn:
            migrate(conn)
        archiver = BatchArchiver(
            PostgresArchiveIngest(dsn),
            consumer_group="g",
            keys=keys,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        assert (archiver._native_row is not None) == (mode == "compiled" and NATIVE_ROW is not None)
        try:
            report = archiver.archive(events)
        finally:
            archiver.close()
        streamed.clear()
        with connect(dsn) as conn:
            audits = {
                bulk: [
                    (a.saga_id, a.ok, a.events)
                    for a in iter_audits(PostgresArchiveAudits(conn), bulk=bulk)
                ]
                for bulk in (True, False)
            }
        assert streamed == [True]  # the bulk audit streamed the rows, form-2 ones referred
        outcomes.append(
            (
                (report.archived, report.duplicates, report.quarantined),
                rows(
                    dsn,
                    "SELECT saga_id, seq, event_type, tool, payload, result, error, actor,"
                    " attributes, recorded_at_us, hash, prev_hash, kafka_offset, form,"
                    " commitments, salts FROM side_effect_journal ORDER BY saga_id, seq",
                ),
                rows(dsn, "SELECT reason, saga_id, seq, kafka_offset FROM archive_quarantine"),
                rows(dsn, "SELECT saga_id, head_seq, head_hash FROM archive_saga_head ORDER BY 1"),
                audits,
            )
        )
        with connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA sealed_{mode} CASCADE")
    assert outcomes[0] == outcomes[1]
    counts, journal, quarantine, heads, audits = outcomes[0]
    assert counts == (7, 0, {QuarantineReason.AUTHENTICATION_FAILED: 1})
    # The quarantine names the saga and seq the sealed field was opened for (its body's).
    assert quarantine == [("authentication failed", "sealed-n", 3, 2)]
    sealed_rows = [r for r in journal if r[0] == "sealed-n"]
    assert [(r[4], r[5], r[13], r[14], r[15]) for r in sealed_rows] == [
        (e.payload, e.result, 2, dict(e.commitments), dict(e.salts)) for e in sealed
    ]
    assert [r[13:] for r in journal if r[0] == "plain-n"] == [(1, {}, {})] * 3
    assert heads == [("plain-n", 3, journal[2][10]), ("sealed-n", 4, sealed[3].hash)]
    assert audits[True] == audits[False] == [("plain-n", True, 3), ("sealed-n", True, 4)]
