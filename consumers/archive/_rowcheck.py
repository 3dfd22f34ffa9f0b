"""Checking one message read from the topic into the archive row it would be: decoded, keyed by
its saga, in the archive's time range, hashing to its own hash.  Three paths decide it (the
compiled module, the Avro record's fields, and the reference path through
:class:`~sagacity.JournalEntry` in :mod:`._ingest`), each accepting only what the reference
accepts."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sagacity._native import native
from sagacity.chain import canonical_bytes_of
from sagacity.entries._events import JournalEntry

if TYPE_CHECKING:
    from sagacity.consumers.archive._ingest import RawEvent
    from sagacity.ports import JournalWire
    from sagacity.privacy._keys import KeyService

Decoder = Callable[[bytes], JournalEntry]
"""Turns a Kafka message value into a journal entry; raises on bytes it cannot decode."""

# Event times a monthly partition can hold: 1970-01-01 up to (not including) year 10000.
_MIN_US = 0
_MAX_US = 253_402_300_800_000_000

JOURNAL_COLUMNS = (
    "saga_id",
    "seq",
    "event_type",
    "tool",
    "payload",
    "result",
    "error",
    "actor",
    "attributes",
    "recorded_at_us",
    "hash",
    "prev_hash",
    "topic",
    "kafka_partition",
    "kafka_offset",
    "form",
    "commitments",
    "salts",
)
"""The columns the archiver writes (the rest are defaults or generated)."""


def _journal_row(
    entry: JournalEntry, topic: str, partition: int, offset: int
) -> tuple[object, ...]:
    """The values :data:`_COPY_JOURNAL` writes for ``entry``, read at ``offset`` of a partition."""
    return (
        entry.saga_id,
        entry.seq,
        entry.event_type.value,
        entry.tool,
        entry.payload,
        entry.result,
        entry.error,
        entry.actor,
        json.dumps(dict(entry.attributes), ensure_ascii=False) if entry.attributes else "{}",
        entry.recorded_at_us,
        entry.hash,
        entry.prev_hash,
        topic,
        partition,
        offset,
        entry.form,
        json.dumps(dict(entry.commitments)) if entry.commitments else "{}",
        json.dumps(dict(entry.salts)) if entry.salts else "{}",
    )


class _Checked:
    """An event that decoded and hashes to its own hash: what classifying and writing need.

    ``row`` is the event's :data:`_COPY_JOURNAL` row, built once when it was checked.
    """

    __slots__ = ("hash", "prev_hash", "recorded_at_us", "row", "saga_id", "seq")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.saga_id: str = row[0]
        self.seq: int = row[1]
        self.recorded_at_us: int = row[9]
        self.hash: str = row[10]
        self.prev_hash: str = row[11]
        self.row = row


def _wire_decoder(wire: JournalWire, keys: KeyService | None = None) -> Decoder:
    """The reference decoder of the journal's own wire format, opening with ``keys``."""
    if keys is None:
        return wire.decode
    return functools.partial(wire.decode, keys=keys)


RecordDecoder = Callable[[bytes], dict[str, Any]]

NativeRow = Callable[[bytes, bytes | None, bytes, str, int, int], tuple[Any, ...] | None]
"""``sagacity_native.archive_row``: (prefix, key, value, topic, partition, offset) to the row
:func:`_checked_from_record` would build, or ``None`` to leave the event to the Python paths."""


def _native_archive_row() -> NativeRow | None:
    """The compiled ingest check (docs/adr/0013-compiled-hot-path.md), unless it is not
    installed or ``SAGACITY_NATIVE=0``."""
    function: NativeRow | None = native("archive_row")
    return function


def _plain_fields(record: Mapping[str, Any], key: bytes | None) -> tuple[Any, ...] | None:
    """The fields of a form-1 record keyed by its saga, ``(saga_id, seq, event_type, tool,
    payload, result, error, actor, attributes, recorded_at_us, prev_hash, hash)``, when
    each is of its type and in its range; ``None`` for anything else (the reference's)."""
    saga_id = record["saga_id"]
    seq = record["seq"]
    event_type = record["event_type"]
    tool = record["tool"]
    payload = record["payload"]
    result = record["result"]
    error = record["error"]
    actor = record["actor"]
    attributes = record["attributes"]
    recorded_at_us = record["recorded_at_us"]
    prev_hash = record["prev_hash"]
    recorded_hash = record["hash"]
    if (
        type(saga_id) is not str
        or not saga_id
        or type(seq) is not int
        or seq < 1
        or type(event_type) is not str
        or not event_type
        or type(recorded_at_us) is not int
        or not _MIN_US <= recorded_at_us < _MAX_US
        or type(prev_hash) is not str
        or type(recorded_hash) is not str
        or type(attributes) is not dict
        or (tool is not None and type(tool) is not str)
        or (payload is not None and type(payload) is not str)
        or (result is not None and type(result) is not str)
        or (error is not None and type(error) is not str)
        or (actor is not None and type(actor) is not str)
        # None formats as "None", which holds no U+0000.
        or "\x00" in f"{saga_id}{event_type}{tool}{payload}{result}{error}{actor}"
        or key != saga_id.encode("utf-8")  # lone surrogates raise: left to the reference
        # Form 2 (docs/adr/0019-erasure.md), or form 1 showing commitments: the reference.
        or record.get("form", 1) != 1
        or record.get("commitments")
        or record.get("salts")
        or record.get("sealed")
    ):
        return None
    return (
        saga_id,
        seq,
        event_type,
        tool,
        payload,
        result,
        error,
        actor,
        attributes,
        recorded_at_us,
        prev_hash,
        recorded_hash,
    )


def _checked_from_record(ev: RawEvent, decode_record: RecordDecoder) -> _Checked | None:
    """``ev`` checked from its Avro record's fields, or ``None`` to leave it to the reference
    path (:meth:`BatchArchiver._decode_entry`, through :class:`JournalEntry`).

    Accepts only what the reference path accepts: a record whose fields make a valid
    :class:`JournalEntry` (the text rules of docs/adr/0002-hash-chain.md, a seq >= 1, int
    times), keyed by its saga, in the archive's time range, hashing to its own hash.  Every
    refusal, and its reason and detail, is the reference path's.
    """
    value = ev.value
    if value is None:
        return None
    try:
        fields = _plain_fields(decode_record(value), ev.key)
        if fields is None:
            return None
        (
            saga_id,
            seq,
            event_type,
            tool,
            payload,
            result,
            error,
            actor,
            attributes,
            recorded_at_us,
            prev_hash,
            recorded_hash,
        ) = fields
        if attributes:
            # join refuses non-text keys and values
            if "\x00" in "".join(attributes) or "\x00" in "".join(attributes.values()):
                return None
            attributes_json = json.dumps(attributes, ensure_ascii=False)
        else:
            attributes_json = "{}"
        prev = bytes.fromhex(prev_hash)
        if len(prev) != 32:
            return None
        canonical = canonical_bytes_of(
            saga_id,
            seq,
            event_type,
            tool,
            payload,
            result,
            error,
            actor,
            recorded_at_us,
            attributes,
        )
        if hashlib.sha256(prev + canonical).hexdigest() != recorded_hash:
            return None
    except Exception:  # anything odd is the reference path's to decide and explain
        return None
    return _Checked(
        (
            saga_id,
            seq,
            event_type,
            tool,
            payload,
            result,
            error,
            actor,
            attributes_json,
            recorded_at_us,
            recorded_hash,
            prev_hash,
            ev.topic,
            ev.partition,
            ev.offset,
            1,
            "{}",
            "{}",
        )
    )
