"""Sealed openings on the wire (docs/adr/0019-erasure.md §3): a form-2 entry's data fields
travel sealed under the saga's data key; a reader with the key service gets the entry back
exactly, one without it (or after an erasure) gets the commitments alone, which still verify."""

from __future__ import annotations

import io
import os

import fastavro
import pytest

from sagacity import GENESIS_HASH, EntryDraft, EventType, JournalEntry, verify
from sagacity.chain import committing, link
from sagacity.errors import CiphertextAuthenticationError, SagaErasedError, SerializationError
from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
from sagacity.privacy._keys import KeyService
from sagacity.schemas import MAGIC, current_schema, decode_entry, encode_entry
from sagacity.schemas._avro import decode_record
from sagacity.schemas._sealed import encode_sealed
from sagacity.testing import InMemoryKeyStore

MARKER = "MARKER-5c1e"


@pytest.fixture
def keys() -> KeyService:
    return KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))


def _chain() -> list[JournalEntry]:
    drafts = [
        EntryDraft(saga_id="s-1", event_type=EventType.SAGA_OPENED),
        EntryDraft(
            saga_id="s-1",
            event_type=EventType.INTENT,
            tool="mail",
            payload=f'{{"to":"ada@example.org","body":"{MARKER}"}}',
        ),
        EntryDraft(
            saga_id="s-1",
            event_type=EventType.EXECUTED,
            tool="mail",
            result=f"sent {MARKER}",
            attributes={"ref_seq": "2", "undo_arguments": f'{{"id":"{MARKER}"}}'},
        ),
        EntryDraft(saga_id="s-1", event_type=EventType.FAILED, tool="mail", error=MARKER),
    ]
    out: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate(drafts, start=1):
        out.append(link(committing(draft), seq=seq, prev_hash=prev))
        prev = out[-1].hash
    return out


def test_sealed_values_are_not_on_the_wire_and_open_exactly(keys: KeyService) -> None:
    chain = _chain()
    values = [encode_sealed(e, keys) for e in chain]
    assert not any(MARKER.encode() in v for v in values)
    assert not any(
        e.salts[n].encode() in v for e, v in zip(chain, values, strict=True) for n in e.salts
    )
    assert [decode_entry(v, keys=keys) for v in values] == chain
    # The unsealed encoding carries the values in clear, as form 1 does.
    assert MARKER.encode() in encode_entry(chain[1])


def test_without_the_key_or_after_erasure_the_commitments_verify(keys: KeyService) -> None:
    chain = _chain()
    values = [encode_sealed(e, keys) for e in chain]
    blind = [decode_entry(v) for v in values]
    assert all(e.payload is None and e.result is None and not e.salts for e in blind)
    assert "undo_arguments" not in blind[2].attributes
    assert [e.hash for e in blind] == [e.hash for e in chain]
    assert verify(blind).ok
    keys.destroy("s-1", actor="dpo@example.org", reason="request 7")
    erased = [decode_entry(v, keys=keys) for v in values]
    assert erased == blind
    assert verify(erased).ok


def test_an_altered_sealed_field_fails_authentication(keys: KeyService) -> None:
    entry = _chain()[1]
    value = bytearray(encode_sealed(entry, keys))
    box = decode_record(bytes(value))["sealed"]["payload"]
    at = bytes(value).index(box)
    value[at + len(box) // 2] ^= 1
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        decode_entry(bytes(value), keys=keys)


def _message(record: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, current_schema().schema, record, strict=True)
    return MAGIC + current_schema().fingerprint + buf.getvalue()


def test_a_sealed_field_moved_fails_authentication(keys: KeyService) -> None:
    """Sealed under (saga, seq, field): moved to another field or seq, it does not open."""
    chain = _chain()
    record = decode_record(encode_sealed(chain[2], keys))
    assert set(record["sealed"]) == {"result", "undo_arguments"}
    to_field = dict(record, sealed={"error": record["sealed"]["result"]})
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        decode_entry(_message(to_field), keys=keys)
    later = decode_record(encode_sealed(chain[3], keys))
    to_seq = dict(later, sealed={"error": record["sealed"]["result"]})
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        decode_entry(_message(to_seq), keys=keys)


def test_form_1_is_not_sealed(keys: KeyService) -> None:
    entry = link(
        EntryDraft(saga_id="s", event_type=EventType.INTENT), seq=1, prev_hash=GENESIS_HASH
    )
    with pytest.raises(SerializationError, match="only a form-2 entry is sealed"):
        encode_sealed(entry, keys)


class _Reversing:
    """A sealer whose output is a function of its input (the AEAD's is not: fresh nonces), so
    that two encodings of one entry can be compared byte for byte."""

    def prepare(self, saga_id: str) -> None:
        del saga_id

    def seal(self, saga_id: str, seq: int, field_name: str, plaintext: bytes) -> bytes:
        return f"{saga_id}/{seq}/{field_name}/".encode() + plaintext[::-1]

    def open(self, saga_id: str, seq: int, field_name: str, sealed: bytes) -> bytes:
        prefix = f"{saga_id}/{seq}/{field_name}/".encode()
        assert sealed.startswith(prefix)
        return sealed[len(prefix) :][::-1]


def test_the_direct_sealed_encoding_is_fastavros_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sagacity.schemas import _sealed

    sealer = _Reversing()
    chain = _chain()
    direct = [encode_sealed(e, sealer) for e in chain]
    monkeypatch.setattr(_sealed, "direct_encoding", lambda: False)
    generic = [encode_sealed(e, sealer) for e in chain]
    assert direct == generic
    assert [decode_entry(v, keys=sealer) for v in direct] == chain


_DRAFTS = [
    EntryDraft(saga_id="s-1", event_type=EventType.INTENT, tool="mail", payload=""),
    EntryDraft(
        saga_id="é✓𝄞",
        event_type=EventType.EXECUTED,
        tool="mail",
        result=f"sent {MARKER}" * 50,
        actor="agent-7",
        attributes={"ref_seq": "2", "undo_arguments": f'{{"id":"{MARKER}"}}', "writer": "w"},
    ),
    EntryDraft(
        saga_id="s-1",
        event_type=EventType.COMPENSATION_FAILED,
        error=MARKER,
        attributes={"note": MARKER, "undo_arguments": "{}", "a": "b"},
    ),
    EntryDraft(saga_id="s-1", event_type=EventType.SAGA_ENDED),  # nothing to seal
]


@pytest.fixture(params=["python", "compiled"])
def sealer_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Which writer ``link_encoded_sealed`` uses (in Python; compiled, the entry made there
    too); the list records, for the compiled one, whether it took each call (it must: a
    decline would test the Python path twice)."""
    from sagacity.schemas import _hotpath

    taken: list[bool] = []
    name = "_native_seal_link_entry"
    compiled = getattr(_hotpath, name)
    if request.param == "python":
        monkeypatch.setattr(_hotpath, name, None)
        return taken
    if compiled is None:
        pytest.skip("the compiled module is not installed (the build test says whether it must)")

    def counting(*args: object) -> object:
        out = compiled(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(_hotpath, name, counting)
    return taken


@pytest.mark.parametrize("draft", _DRAFTS)
def test_the_one_pass_sealed_writer_is_committing_link_and_encode_sealed(
    draft: EntryDraft, keys: KeyService, sealer_path: list[bool]
) -> None:
    from sagacity.schemas._hotpath import link_encoded_sealed

    prev = "ab" * 32
    entry, value = link_encoded_sealed(draft, seq=7, prev_hash=prev, keys=keys)
    assert sealer_path in ([], [True])
    # The entry is the one the Python writers make with the same salts ...
    same = link(
        committing(draft, salt=lambda n: bytes.fromhex(entry.salts[n])), seq=7, prev_hash=prev
    )
    assert entry == same
    assert entry.hash == same.hash
    # ... the value carries it sealed (nothing of the data in clear), opening back exactly ...
    assert MARKER.encode() not in value
    assert decode_entry(value, keys=keys) == entry
    # ... and the record is encode_sealed's for that entry, but for the fresh nonces.
    ours, theirs = decode_record(value), decode_record(encode_sealed(entry, keys))
    assert sorted(ours.pop("sealed")) == sorted(theirs.pop("sealed"))
    assert ours == theirs


@pytest.mark.parametrize("draft", _DRAFTS)
def test_the_writer_attribute_added_by_the_sealed_link_step_is_with_attribute_linked(
    draft: EntryDraft, keys: KeyService, sealer_path: list[bool]
) -> None:
    """``link_encoded_sealed(draft, attribute=...)`` is ``link_encoded_sealed`` of the draft
    with the attribute added (the same salts drawn), and leaves the draft as it was."""
    from sagacity.entries._events import with_attribute
    from sagacity.schemas._hotpath import link_encoded_sealed

    prev = "ab" * 32
    before = dict(draft.attributes)
    entry, value = link_encoded_sealed(
        draft, seq=7, prev_hash=prev, keys=keys, attribute=("writer", "host/1")
    )
    assert sealer_path in ([], [True])
    assert entry.attributes["writer"] == "host/1"
    assert dict(draft.attributes) == before
    same = link(
        committing(
            with_attribute(draft, "writer", "host/1"),
            salt=lambda n: bytes.fromhex(entry.salts[n]),
        ),
        seq=7,
        prev_hash=prev,
    )
    assert entry == same
    assert decode_entry(value, keys=keys) == entry


def test_a_field_the_one_pass_writer_sealed_opens_only_in_its_place(
    keys: KeyService, sealer_path: list[bool]
) -> None:
    from sagacity.schemas._hotpath import link_encoded_sealed

    entry, value = link_encoded_sealed(_DRAFTS[1], seq=3, prev_hash=GENESIS_HASH, keys=keys)
    sealed = decode_record(value)["sealed"]["result"]
    opening = keys.open(entry.saga_id, 3, "result", sealed)
    assert opening[32:].decode() == entry.result
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        keys.open(entry.saga_id, 4, "result", sealed)
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        keys.open(entry.saga_id, 3, "payload", sealed)


def test_the_one_pass_sealed_writer_refuses_what_the_chain_refuses(
    keys: KeyService, sealer_path: list[bool]
) -> None:
    from sagacity.schemas._hotpath import link_encoded_sealed

    draft = EntryDraft(saga_id="s-1", event_type=EventType.INTENT, payload="{}")
    with pytest.raises(SerializationError, match="seq"):
        link_encoded_sealed(draft, seq=0, prev_hash=GENESIS_HASH, keys=keys)
    with pytest.raises(SerializationError, match="hash"):
        link_encoded_sealed(draft, seq=1, prev_hash="zz", keys=keys)
    with pytest.raises(SerializationError, match="form 2"):
        link_encoded_sealed(committing(draft), seq=1, prev_hash=GENESIS_HASH, keys=keys)
    assert True not in sealer_path  # each was handed back to the Python path, which says why


def test_an_event_without_data_is_written_for_an_erased_saga(
    keys: KeyService, sealer_path: list[bool]
) -> None:
    from sagacity.schemas._hotpath import link_encoded_sealed

    link_encoded_sealed(_DRAFTS[0], seq=2, prev_hash=GENESIS_HASH, keys=keys)
    keys.destroy("s-1", actor="dpo", reason="art. 17")
    record = EntryDraft(saga_id="s-1", event_type=EventType.ERASED, attributes={"reason": "r"})
    entry, value = link_encoded_sealed(record, seq=3, prev_hash=GENESIS_HASH, keys=keys)
    assert decode_entry(value) == entry
    assert entry.form == 2
    with pytest.raises(SagaErasedError):
        link_encoded_sealed(_DRAFTS[0], seq=4, prev_hash=entry.hash, keys=keys)


def test_the_compiled_sealer_makes_its_entry_with_the_public_constructor(keys: KeyService) -> None:
    """``seal_link_entry`` builds the form-2 entry by calling the constructor it is given
    (``JournalEntry.placed``) with the salts and commitments it drew."""
    from sagacity.schemas import _hotpath

    compiled = _hotpath._native_seal_link_entry
    if compiled is None:
        pytest.skip("the compiled module is not installed (the build test says whether it must)")
    calls: list[tuple[object, ...]] = []

    def place(*args: object) -> JournalEntry:
        calls.append(args)
        return JournalEntry.placed(*args)  # type: ignore[arg-type]

    draft = _DRAFTS[1]
    keys.prepare(draft.saga_id)
    made = compiled(
        _hotpath._native_header(), "ab" * 32, 7, draft, place, keys.material(draft.saga_id), None
    )
    assert made is not None
    entry, value = made
    assert len(calls) == 1
    given, seq, prev_hash, hash_, attributes, commitments, salts = calls[0]
    assert (given, seq, prev_hash, hash_, attributes) == (draft, 7, "ab" * 32, entry.hash, None)
    assert entry.form == 2
    assert dict(entry.commitments) == commitments
    assert dict(entry.salts) == salts
    same = link(
        committing(draft, salt=lambda n: bytes.fromhex(entry.salts[n])), seq=7, prev_hash="ab" * 32
    )
    assert entry == same
    assert decode_entry(value, keys=keys) == entry
