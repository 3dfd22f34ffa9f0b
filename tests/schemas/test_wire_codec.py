"""The journal event codec: exact round trips and typed errors on anything else."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity import EntryDraft, EventType, JournalEntry, verify
from sagacity.chain import compute_hash, link
from sagacity.errors import SerializationError
from sagacity.schemas import (
    HEADER_SIZE,
    MAGIC,
    current_schema,
    decode_entry,
    encode_entry,
    link_encoded,
    peek_fingerprint,
)
from sagacity.schemas._hotpath import _link_encoded_python

GENESIS = "0" * 64
text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
)
maybe_text = st.none() | text


def _entry(**overrides: object) -> JournalEntry:
    fields: dict[str, object] = {
        "saga_id": "saga-1",
        "event_type": EventType.INTENT,
        "tool": "refund",
        "payload": '{"amount":100,"to":"alice"}',
        "attributes": {"payload_sha256": "ab" * 32, "ref_seq": "3"},
        "recorded_at_us": 1_764_000_000_123_456,
    }
    fields.update(overrides)
    return link(EntryDraft(**fields), seq=1, prev_hash=GENESIS)  # type: ignore[arg-type]


def test_header_is_avro_single_object_encoding() -> None:
    data = encode_entry(_entry())
    assert data[:2] == b"\xc3\x01" == MAGIC
    assert data[2:HEADER_SIZE] == current_schema().fingerprint
    assert peek_fingerprint(data) == current_schema().fingerprint


def test_fingerprint_is_the_crc64_avro_of_the_canonical_form() -> None:
    # Independent Rabin fingerprint (Avro specification), little-endian as the spec frames it.
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in current_schema().canonical_form.encode("utf-8"):
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    assert current_schema().fingerprint == fp.to_bytes(8, "little")


def test_round_trip_keeps_every_field_and_the_hash() -> None:
    entry = _entry(result=None, error="", actor="writer-7")
    back = decode_entry(encode_entry(entry))
    assert back == entry
    assert back.error == ""  # empty string stays distinct from null
    assert back.result is None
    assert compute_hash(back.prev_hash, back, seq=back.seq) == entry.hash
    assert verify([back]).ok


@settings(max_examples=200, deadline=None)
@given(
    saga_id=text.filter(bool),
    seq=st.integers(min_value=1, max_value=2**63 - 1),
    event_type=st.sampled_from(list(EventType)),
    tool=maybe_text,
    payload=maybe_text,
    result=maybe_text,
    error=maybe_text,
    actor=maybe_text,
    attributes=st.dictionaries(text, text, max_size=4),
    recorded_at_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_round_trip_is_exact_for_any_entry(
    saga_id: str,
    seq: int,
    event_type: EventType,
    tool: str | None,
    payload: str | None,
    result: str | None,
    error: str | None,
    actor: str | None,
    attributes: dict[str, str],
    recorded_at_us: int,
) -> None:
    draft = EntryDraft(
        saga_id=saga_id,
        event_type=event_type,
        tool=tool,
        payload=payload,
        result=result,
        error=error,
        actor=actor,
        attributes=attributes,
        recorded_at_us=recorded_at_us,
    )
    entry = link(draft, seq=seq, prev_hash="ab" * 32)
    back = decode_entry(encode_entry(entry))
    assert back.to_dict() == entry.to_dict()
    assert compute_hash(back.prev_hash, back, seq=seq) == entry.hash


def _fastavro_encoding(entry: JournalEntry) -> bytes:
    import io

    import fastavro

    from sagacity.schemas import entry_record

    buf = io.BytesIO()
    buf.write(MAGIC + current_schema().fingerprint)
    fastavro.schemaless_writer(buf, current_schema().schema, entry_record(entry), strict=True)
    return buf.getvalue()


def test_the_direct_encoder_covers_the_current_schema() -> None:
    from sagacity.schemas._avro import direct_encoding

    # A schema change must extend the direct encoder (or encoding falls back to fastavro).
    assert direct_encoding()


@settings(max_examples=200, deadline=None)
@given(
    saga_id=text.filter(bool),
    seq=st.integers(min_value=1, max_value=2**63 - 1),
    event_type=st.sampled_from(list(EventType)),
    tool=maybe_text,
    payload=st.none() | text | text.map(lambda t: "é" * 2100 + t),  # past 4096 bytes
    result=maybe_text,
    error=maybe_text,
    actor=maybe_text,
    attributes=st.dictionaries(text, text, max_size=70),
    recorded_at_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_encoding_is_byte_identical_to_fastavro(
    saga_id: str,
    seq: int,
    event_type: EventType,
    tool: str | None,
    payload: str | None,
    result: str | None,
    error: str | None,
    actor: str | None,
    attributes: dict[str, str],
    recorded_at_us: int,
) -> None:
    draft = EntryDraft(
        saga_id=saga_id,
        event_type=event_type,
        tool=tool,
        payload=payload,
        result=result,
        error=error,
        actor=actor,
        attributes=attributes,
        recorded_at_us=recorded_at_us,
    )
    entry = link(draft, seq=seq, prev_hash="ab" * 32)
    assert encode_entry(entry) == _fastavro_encoding(entry)
    # The journal's one-pass link and encode gives the same entry and the same bytes, compiled
    # (where it is built) and in Python.
    linked, value = link_encoded(draft, seq=seq, prev_hash="ab" * 32)
    assert linked == entry
    assert value == encode_entry(entry)
    in_python = _link_encoded_python(draft, seq=seq, prev_hash="ab" * 32, prev=b"\xab" * 32)
    assert in_python == (linked, value)


def test_the_compiled_hot_path_is_built_where_cargo_is() -> None:
    """deploy/local builds native/ wherever cargo is (unless SAGACITY_NATIVE=0): a test run
    there must not silently measure or check the Python path only."""
    import os
    import shutil

    from sagacity.schemas import _hotpath

    wanted = os.environ.get("SAGACITY_NATIVE", "1") != "0"
    cargo = shutil.which("cargo") or (Path.home() / ".cargo" / "bin" / "cargo").exists()
    if wanted and cargo:
        assert _hotpath.NATIVE, "cargo is here but sagacity-native is not installed"
    if not wanted:
        assert not _hotpath.NATIVE


@pytest.mark.parametrize(
    "draft",
    [
        EntryDraft(saga_id="s", event_type=EventType.INTENT, payload=""),
        EntryDraft(saga_id="é✓𝄞", event_type=EventType.EXECUTED, result="x" * 200_000),
        EntryDraft(
            saga_id="s",
            event_type=EventType.APPROVED,
            actor="a",
            attributes={f"k{i:03d}": "v" * i for i in range(130)},
            recorded_at_us=-(2**63),
        ),
        EntryDraft(saga_id="s", event_type=EventType.INTENT, recorded_at_us=2**63 - 1),
    ],
)
def test_compiled_and_python_paths_agree_on_edge_cases(draft: EntryDraft) -> None:
    for seq, prev in [(1, GENESIS), (2**63 - 1, "AB" * 32), (128, "0f" * 32)]:
        expected = _link_encoded_python(draft, seq=seq, prev_hash=prev, prev=bytes.fromhex(prev))
        assert link_encoded(draft, seq=seq, prev_hash=prev) == expected
        entry = link(draft, seq=seq, prev_hash=prev)
        assert expected == (entry, encode_entry(entry))


def test_an_unknown_event_type_encodes_as_fastavro_does() -> None:
    from sagacity import UnknownEventType

    entry = replace(_entry(), event_type=UnknownEventType("TELEPORTED"))
    assert encode_entry(entry) == _fastavro_encoding(entry)


@pytest.mark.parametrize("recorded_at_us", [2**63, -(2**63) - 1])
def test_a_time_beyond_64_bits_is_a_serialization_error(recorded_at_us: int) -> None:
    # Refused where the entry is made (decoded, or read back from a table): it is no entry.
    with pytest.raises(SerializationError, match="64 bits"):
        JournalEntry(
            saga_id="s",
            event_type=EventType.INTENT,
            seq=1,
            recorded_at_us=recorded_at_us,
            prev_hash=GENESIS,
            hash=GENESIS,
        )


@pytest.mark.parametrize("recorded_at_us", [2**63, -(2**63) - 1])
def test_linking_a_time_beyond_64_bits_is_a_serialization_error(recorded_at_us: int) -> None:
    # No draft holds one, so nothing links or encodes it.
    with pytest.raises(SerializationError, match="64 bits"):
        EntryDraft(saga_id="s", event_type=EventType.INTENT, recorded_at_us=recorded_at_us)


@pytest.mark.parametrize(
    ("seq", "prev_hash", "message"),
    [(0, GENESIS, "seq must be"), (1, "zz" * 32, "not hex"), (1, "ab" * 31, "32 bytes")],
)
def test_linking_refuses_a_bad_position(seq: int, prev_hash: str, message: str) -> None:
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT)
    with pytest.raises(SerializationError, match=message):
        link_encoded(draft, seq=seq, prev_hash=prev_hash)
    with pytest.raises(SerializationError, match=message):
        link(draft, seq=seq, prev_hash=prev_hash)


def test_a_field_of_the_wrong_type_is_a_serialization_error() -> None:
    entry = JournalEntry(
        saga_id="s",
        event_type=EventType.INTENT,
        seq=1,
        prev_hash=GENESIS,
        hash=7,  # type: ignore[arg-type]
    )
    with pytest.raises(SerializationError, match="does not fit"):
        encode_entry(entry)


def test_seq_beyond_64_bits_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="2\\^63"):
        JournalEntry(
            saga_id="s", event_type=EventType.INTENT, seq=2**63, prev_hash=GENESIS, hash=GENESIS
        )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\xc3\x01\x00", "truncated"),
        (b'{"saga_id": "s"}', "not a journal event"),
        (b"\x00\x00\x00\x00\x01" + b"\x00" * 10, "not a journal event"),  # a registry frame
        (MAGIC + b"\x00" * 8 + b"\x02", "unknown schema fingerprint"),
    ],
)
def test_garbage_is_refused_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason):
        decode_entry(data)


def test_not_bytes_is_refused() -> None:
    with pytest.raises(SerializationError, match="bytes"):
        decode_entry("hello")  # type: ignore[arg-type]


def test_every_truncation_is_refused() -> None:
    data = encode_entry(_entry(result="r", error="e", actor="a"))
    for cut in range(len(data)):
        with pytest.raises(SerializationError):
            decode_entry(data[:cut])


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(SerializationError, match="unexpected bytes"):
        decode_entry(encode_entry(_entry()) + b"\x00")


def test_unknown_event_type_decodes_carrying_its_exact_name() -> None:
    import io

    import fastavro

    from sagacity import UnknownEventType
    from sagacity.schemas import entry_record

    known = _entry()
    future = UnknownEventType("TELEPORTED")
    record = entry_record(known)
    record["event_type"] = "TELEPORTED"
    record["hash"] = compute_hash(known.prev_hash, replace(known, event_type=future), seq=known.seq)
    buf = io.BytesIO()
    buf.write(MAGIC + current_schema().fingerprint)
    fastavro.schemaless_writer(buf, current_schema().schema, record)
    decoded = decode_entry(buf.getvalue())
    assert isinstance(decoded.event_type, UnknownEventType)
    assert decoded.event_type == "TELEPORTED"
    assert decoded.event_type.value == "TELEPORTED"
    assert compute_hash(decoded.prev_hash, decoded, seq=decoded.seq) == decoded.hash
    assert encode_entry(decoded) == buf.getvalue()


def test_an_empty_event_type_is_refused() -> None:
    import io

    import fastavro

    from sagacity.schemas import entry_record

    record = entry_record(_entry())
    record["event_type"] = ""
    buf = io.BytesIO()
    buf.write(MAGIC + current_schema().fingerprint)
    fastavro.schemaless_writer(buf, current_schema().schema, record)
    with pytest.raises(SerializationError, match="invalid event type ''"):
        decode_entry(buf.getvalue())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_a_valid_header_never_escape_as_another_error(body: bytes) -> None:
    with contextlib.suppress(SerializationError):
        decode_entry(MAGIC + current_schema().fingerprint + body)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_bytes_are_refused_or_fail_verification(data: st.DataObject) -> None:
    original = encode_entry(_entry(result="ok", actor="w"))
    position = data.draw(st.integers(min_value=HEADER_SIZE, max_value=len(original) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    corrupted = bytearray(original)
    corrupted[position] ^= flip
    try:
        entry = decode_entry(bytes(corrupted))
    except SerializationError:
        return
    assert not verify([entry]).ok or entry.to_dict() == decode_entry(original).to_dict()


def test_schema_file_documents_its_version_default() -> None:
    schema_dir = Path(__file__).parents[2] / "schemas"
    doc = json.loads((schema_dir / "journal_event.avsc").read_text("utf-8"))
    names = [f["name"] for f in doc["fields"]]
    assert names[0] == "schema_version"
    assert set(JournalEntry.__dataclass_fields__) <= set(names)


@pytest.mark.parametrize("key", ["writer", "a", "ref_seq", "zz"])
@pytest.mark.parametrize("path", ["link_entry", "link_encode", "python"])
def test_the_writer_attribute_added_by_the_link_step_is_with_attribute_linked(
    key: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``link_encoded(draft, attribute=...)`` hashes and encodes exactly what linking the
    draft with the attribute added gives (sorted in, or replacing one of the same key), on
    each of its paths (compiled with the entry made there, compiled, Python), and leaves the
    draft as it was."""
    from sagacity.entries._events import with_attribute
    from sagacity.schemas import _hotpath

    if path != "python" and _hotpath._native_link_entry is None:
        pytest.skip("the compiled module is not installed (the build test says whether it must)")
    if path != "link_entry":
        monkeypatch.setattr(_hotpath, "_native_link_entry", None)
    if path == "python":
        monkeypatch.setattr(_hotpath, "_native_link_encode", None)
    draft = EntryDraft(
        saga_id="saga-1",
        event_type=EventType.INTENT,
        tool="refund",
        payload='{"amount":100}',
        attributes={"payload_sha256": "ab" * 32, "ref_seq": "3"},
    )
    before = dict(draft.attributes)
    entry, value = link_encoded(draft, seq=5, prev_hash="cd" * 32, attribute=(key, "w/1"))
    expected = link(with_attribute(draft, key, "w/1"), seq=5, prev_hash="cd" * 32)
    assert entry == expected
    assert list(entry.attributes) == sorted(entry.attributes)
    assert value == encode_entry(expected)
    assert dict(draft.attributes) == before


@pytest.mark.parametrize("value", ["w\x00", "\ud800"])
def test_a_writer_attribute_that_is_not_text_is_refused_by_the_link_step(value: str) -> None:
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, payload="{}")
    with pytest.raises(SerializationError, match="attribute 'writer'"):
        link_encoded(draft, seq=1, prev_hash=GENESIS, attribute=("writer", value))


def test_the_compiled_link_step_makes_its_entry_with_the_public_constructor() -> None:
    """``link_entry`` builds the entry by calling the constructor it is given
    (``JournalEntry.placed``) with the draft, the link and the merged attributes, never by
    writing the entry's slots itself (docs/adr/0024-hot-path-under-the-gil.md)."""
    from sagacity.entries._events import with_attribute
    from sagacity.schemas import _hotpath

    compiled = _hotpath._native_link_entry
    if compiled is None:
        pytest.skip("the compiled module is not installed (the build test says whether it must)")
    calls: list[tuple[object, ...]] = []

    def place(*args: object) -> JournalEntry:
        calls.append(args)
        return JournalEntry.placed(*args)  # type: ignore[arg-type]

    draft = EntryDraft(
        saga_id="saga-1",
        event_type=EventType.INTENT,
        tool="refund",
        payload='{"amount":100}',
        attributes={"payload_sha256": "ab" * 32, "ref_seq": "3"},
    )
    made = compiled(_hotpath._native_header(), "cd" * 32, 5, draft, place, ("writer", "w/1"))
    assert made is not None
    entry, value = made
    expected = link(with_attribute(draft, "writer", "w/1"), seq=5, prev_hash="cd" * 32)
    assert entry == expected
    assert value == encode_entry(expected)
    assert len(calls) == 1
    given, seq, prev_hash, hash_, attributes, commitments, salts = calls[0]
    assert (given, seq, prev_hash, hash_) == (draft, 5, "cd" * 32, expected.hash)
    assert attributes == dict(expected.attributes)
    assert (commitments, salts) == (None, None)
    # Without an attribute to merge, the draft's own mapping is the entry's.
    entry, _ = compiled(_hotpath._native_header(), "cd" * 32, 5, draft, place, None)
    assert calls[1][4] is None
    assert entry.attributes is draft.attributes


def test_placed_takes_the_draft_as_it_is_and_the_entry_stays_frozen() -> None:
    import dataclasses

    draft = EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED, actor="w")
    entry = JournalEntry.placed(draft, 1, GENESIS, "ab" * 32)
    assert (entry.seq, entry.prev_hash, entry.hash, entry.actor) == (1, GENESIS, "ab" * 32, "w")
    assert entry.form == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.hash = "cd" * 32  # type: ignore[misc]
    sealed = JournalEntry.placed(
        draft, 1, GENESIS, "ab" * 32, None, {"payload": "01" * 32}, {"payload": "02" * 32}
    )
    assert (sealed.form, dict(sealed.commitments), dict(sealed.salts)) == (
        2,
        {"payload": "01" * 32},
        {"payload": "02" * 32},
    )
