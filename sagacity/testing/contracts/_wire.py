"""The contract every :class:`~sagacity.ports.JournalWire` meets; subclass it per format.

A subclass provides :meth:`JournalWireContract.create_wire` and
:meth:`JournalWireContract.encode`: the value the journal's writer produces for an entry (the
port only reads; the suite holds it to what the writer writes)::

    class TestAvroWire(JournalWireContract):
        def create_wire(self):
            return JOURNAL_WIRE

        def encode(self, entry):
            return encode_entry(entry)
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import pytest

from sagacity import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.chain import committing, link
from sagacity.errors import SerializationError
from sagacity.ports import JournalWire

E = EventType

_SAGA = "contract-wire-sága"

DRAFTS = (
    EntryDraft(saga_id=_SAGA, event_type=E.SAGA_OPENED, actor="writer-1", recorded_at_us=1),
    EntryDraft(
        saga_id=_SAGA,
        event_type=E.AWAITING_APPROVAL,
        tool="send_wire_transfer",
        payload='{"amount":"100","to":"ålice"}',
        attributes={"policy_version": "1", "signatures_required": "1"},
        recorded_at_us=1_767_225_600_000_002,
    ),
    EntryDraft(
        saga_id=_SAGA,
        event_type=E.FAILED,
        tool="send_wire_transfer",
        error="the bank said no \u2013 twice\n",
        result="",
        actor="writer-1",
        recorded_at_us=1_767_225_600_000_003,
    ),
)
"""Drafts of one saga, linked into the chain :func:`chain` returns."""


def chain() -> list[JournalEntry]:
    """The :data:`DRAFTS` linked from genesis, then one committed to (form 2, in clear)."""
    committed = committing(
        EntryDraft(
            saga_id=_SAGA,
            event_type=E.INTENT,
            tool="refund",
            payload='{"amount":"5"}',
            recorded_at_us=1_767_225_600_000_004,
        )
    )
    entries: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate((*DRAFTS, committed), start=1):
        entries.append(link(draft, seq=seq, prev_hash=prev))
        prev = entries[-1].hash
    return entries


def _damaged(value: bytes, prefix: bytes) -> dict[str, bytes]:
    """Values derived from a good ``value`` that no reader may take for an entry."""
    return {
        "empty": b"",
        "foreign json": b'{"saga_id": "s", "seq": 1}',
        "the prefix alone": prefix,
        "truncated header": value[: len(prefix) - 1],
        "truncated body": value[:-3],
        "bytes after the record": value + b"\x00\x02",
        "another marker": bytes([value[0] ^ 0xFF]) + value[1:],
        "an unknown schema": value[:1]
        + bytes(b ^ 0xFF for b in value[1 : len(prefix)])
        + value[len(prefix) :],
    }


class JournalWireContract(abc.ABC):
    """Decode what the writer encodes, recognise it by its first bytes, refuse the rest."""

    @abc.abstractmethod
    def create_wire(self) -> JournalWire:
        """The wire format under test."""

    @abc.abstractmethod
    def encode(self, entry: JournalEntry) -> bytes:
        """The message value the journal's writer produces for ``entry``."""

    @pytest.fixture
    def wire(self) -> JournalWire:
        return self.create_wire()

    def test_it_decodes_what_the_writer_encodes(self, wire: JournalWire) -> None:
        entries = chain()
        assert {entry.form for entry in entries} == {1, 2}
        assert [wire.decode(self.encode(entry)) for entry in entries] == entries

    def test_every_encoded_value_starts_with_the_prefix(self, wire: JournalWire) -> None:
        prefix = wire.prefix
        assert isinstance(prefix, bytes)
        assert prefix
        assert wire.prefix == prefix  # one format, one prefix
        for entry in chain():
            value = self.encode(entry)
            assert value.startswith(prefix)
            assert len(value) > len(prefix)

    def test_the_record_gives_the_fields_as_written(self, wire: JournalWire) -> None:
        for entry in chain():
            record = wire.record(self.encode(entry))
            assert record["saga_id"] == entry.saga_id
            assert record["seq"] == entry.seq
            assert record["event_type"] == entry.event_type.value
            assert record["tool"] == entry.tool
            assert record["payload"] == entry.payload
            assert record["result"] == entry.result
            assert record["error"] == entry.error
            assert record["actor"] == entry.actor
            assert record["recorded_at_us"] == entry.recorded_at_us
            assert dict(record["attributes"]) == dict(entry.attributes)
            assert record["prev_hash"] == entry.prev_hash
            assert record["hash"] == entry.hash
            assert record["form"] == entry.form
            assert dict(record["commitments"]) == dict(entry.commitments)
            assert dict(record["salts"]) == dict(entry.salts)

    @pytest.mark.parametrize("read", ["decode", "record"])
    def test_a_damaged_or_foreign_value_is_refused(self, wire: JournalWire, read: str) -> None:
        reading: Callable[[bytes], object] = getattr(wire, read)
        value = self.encode(chain()[1])
        for name, damaged in _damaged(value, wire.prefix).items():
            try:
                reading(damaged)
            except SerializationError:
                continue
            pytest.fail(f"{read} took {name!r} for an entry")
