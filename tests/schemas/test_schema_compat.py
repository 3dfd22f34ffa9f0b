"""Schema evolution: every released reader reads what the current writer writes, and back.

Old readers reading new events is the guarantee the journal's consumers depend on (a service
not yet upgraded keeps working); the current reader reading every released writer's events is
what the archive and auditors need for replay.  The check is fastavro's own schema resolution.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterable
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError

from sagacity import EntryDraft, EventType
from sagacity.chain import committing, link
from sagacity.errors import SerializationError
from sagacity.schemas import (
    MAGIC,
    SCHEMA_VERSION,
    current_schema,
    decode_entry,
    encode_entry,
    entry_record,
    known_fingerprints,
    released_schemas,
    schema_fingerprint,
)


def _samples() -> list[dict[str, Any]]:
    """Records exercising every union branch (null and text) and an empty and full map."""
    bare = link(
        EntryDraft(saga_id="s-1", event_type=EventType.SAGA_OPENED), seq=1, prev_hash="0" * 64
    )
    full = link(
        EntryDraft(
            saga_id="s-1",
            event_type=EventType.APPROVED,
            tool="wire_transfer",
            payload='{"amount":"100.00","to":"alice"}',
            result="ok",
            error="",
            actor="approver@example.com",
            attributes={"ref_seq": "2", "policy_version": "3"},
        ),
        seq=2,
        prev_hash=bare.hash,
    )
    # Form 2 (docs/adr/0019-erasure.md): the commitment and salt maps filled.
    committed = link(committing(full), seq=3, prev_hash=full.hash)
    return [entry_record(bare), entry_record(full), entry_record(committed)]


def _write(schema: Any, records: Iterable[dict[str, Any]]) -> list[bytes]:
    out = []
    for record in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, record, strict=True)
        out.append(buf.getvalue())
    return out


def old_reader_reads_new_writer(
    writer: Any, reader: Any, records: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Decode ``records`` written with ``writer`` through ``reader`` (schema resolution)."""
    decoded = []
    for data in _write(writer, records):
        buf = io.BytesIO(data)
        decoded.append(fastavro.schemaless_reader(buf, writer, reader))
        assert buf.tell() == len(data)
    return decoded


def _parse(doc: dict[str, Any]) -> Any:
    return fastavro.parse_schema(doc, _force=True)


@pytest.mark.parametrize("version", sorted(released_schemas()))
def test_released_reader_reads_current_events(version: int) -> None:
    reader = released_schemas()[version]
    records = _samples()
    decoded = old_reader_reads_new_writer(current_schema().schema, reader.schema, records)
    reader_fields = {f["name"] for f in reader.schema["fields"]}
    for record, got in zip(records, decoded, strict=True):
        assert got == {k: v for k, v in record.items() if k in reader_fields}


@pytest.mark.parametrize("version", sorted(released_schemas()))
def test_current_reader_decodes_released_events(version: int) -> None:
    writer = released_schemas()[version]
    writer_fields = {f["name"] for f in writer.schema["fields"]}
    for record in _samples():
        old = {k: v for k, v in record.items() if k in writer_fields}
        data = MAGIC + writer.fingerprint + _write(writer.schema, [old])[0]
        entry = decode_entry(data)
        assert entry.hash == record["hash"]
        assert entry.seq == record["seq"]


def test_current_schema_is_released_under_its_version() -> None:
    versions = sorted(released_schemas())
    assert versions == list(range(1, len(versions) + 1)), "released versions must be contiguous"
    assert versions[-1] == SCHEMA_VERSION, "SCHEMA_VERSION must name the newest release"
    assert released_schemas()[SCHEMA_VERSION].fingerprint == current_schema().fingerprint, (
        "schemas/journal_event.avsc changed: copy it to schemas/released/"
        f"journal_event.v{SCHEMA_VERSION + 1}.avsc and bump SCHEMA_VERSION"
    )


def test_every_released_fingerprint_is_decodable() -> None:
    assert {w.fingerprint for w in released_schemas().values()} <= known_fingerprints()
    assert len({w.fingerprint for w in released_schemas().values()}) == len(released_schemas())


def test_a_written_event_carries_its_schema_version() -> None:
    entry = link(EntryDraft(saga_id="s", event_type=EventType.INTENT), seq=1, prev_hash="0" * 64)
    data = encode_entry(entry)
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), current_schema().schema, None)
    assert record["schema_version"] == SCHEMA_VERSION


# --- the check itself fails on incompatible changes --------------------------------------


def _current_doc() -> dict[str, Any]:
    return json.loads(current_schema().canonical_form)


def _mutate_retype_seq() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = _current_doc()
    for f in doc["fields"]:
        if f["name"] == "seq":
            f["type"] = "string"
    records = [dict(r, seq=str(r["seq"])) for r in _samples()]
    return doc, records


def _mutate_drop_hash() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = _current_doc()
    doc["fields"] = [f for f in doc["fields"] if f["name"] != "hash"]
    records = [{k: v for k, v in r.items() if k != "hash"} for r in _samples()]
    return doc, records


def _mutate_enum_event_type() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = _current_doc()
    for f in doc["fields"]:
        if f["name"] == "event_type":
            f["type"] = {
                "type": "enum",
                "name": "EventType",
                "symbols": ["SAGA_OPENED", "APPROVED"],
            }
    return doc, _samples()


def _mutate_tool_not_nullable() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = _current_doc()
    for f in doc["fields"]:
        if f["name"] == "tool":
            f["type"] = "int"
    records = [dict(r, tool=7) for r in _samples()]
    return doc, records


@pytest.mark.parametrize(
    "mutation",
    [_mutate_retype_seq, _mutate_drop_hash, _mutate_enum_event_type, _mutate_tool_not_nullable],
)
def test_incompatible_writer_is_caught_by_the_check(mutation: Any) -> None:
    doc, records = mutation()
    writer = _parse(doc)
    assert schema_fingerprint(writer) != current_schema().fingerprint
    for version in released_schemas():
        with pytest.raises(SchemaResolutionError):
            old_reader_reads_new_writer(writer, released_schemas()[version].schema, records)


def test_compatible_addition_passes_the_check() -> None:
    doc = copy.deepcopy(_current_doc())
    doc["fields"].append({"name": "tenant", "type": ["null", "string"], "default": None})
    records = [dict(r, tenant="acme") for r in _samples()]
    for version in released_schemas():
        got = old_reader_reads_new_writer(_parse(doc), released_schemas()[version].schema, records)
        assert all("tenant" not in g for g in got)


def test_event_from_an_unreleased_writer_is_refused() -> None:
    doc = _current_doc()
    doc["fields"].append({"name": "tenant", "type": ["null", "string"], "default": None})
    writer = _parse(doc)
    record = dict(_samples()[0], tenant="acme")
    data = MAGIC + schema_fingerprint(writer) + _write(writer, [record])[0]
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        decode_entry(data)
