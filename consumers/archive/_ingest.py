"""Archiving a batch of journal events: verify each against its saga's archived head, write the
accepted ones with COPY, quarantine the rest, and store the consumer position, all in one
transaction."""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import NoneType
from typing import TYPE_CHECKING, Any

import psycopg

from sagacity._events import GENESIS_HASH, JournalEntry
from sagacity._native import native
from sagacity.chain import canonical_bytes_of, compute_hash
from sagacity.consumers.archive._authorship import Authorship
from sagacity.consumers.archive._db import mapped_errors
from sagacity.errors import (
    PersistenceError,
    PersistenceUnavailableError,
    SagacityError,
    UnopenableError,
)

if TYPE_CHECKING:
    from sagacity.schemas._codec import FieldSealer

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

_COPY_JOURNAL = f"COPY side_effect_journal ({', '.join(JOURNAL_COLUMNS)}) FROM STDIN"
_COPY_QUARANTINE = (
    "COPY archive_quarantine (reason, detail, saga_id, seq, topic, kafka_partition,"
    " kafka_offset, raw_key, raw_value) FROM STDIN"
)


class QuarantineReason(enum.StrEnum):
    """Why an event was refused on ingest (``archive_quarantine.reason``)."""

    UNDECODABLE = "undecodable"
    """The bytes are not a journal event (or not a valid one)."""
    FORK = "fork"
    """Another event already holds this seq in the saga's archived chain."""
    GAP = "gap"
    """The event's seq is beyond the saga's archived head plus one."""
    WRONG_GENESIS = "wrong_genesis"
    """A first event whose previous hash is not the genesis hash."""
    BROKEN_LINK = "broken_link"
    """The previous hash is not the archived head's hash."""
    EDITED = "edited"
    """The content does not hash to the event's recorded hash."""
    BAD_TIME = "bad_time"
    """The event time is outside what the archive can partition (before 1970, after 9999)."""
    FOREIGN = "foreign"
    """The message's key is not the saga its body names (no reader of either saga accepts it)."""
    AUTHENTICATION_FAILED = "authentication failed"
    """A sealed data field does not authenticate under its saga's data key: altered, or moved
    to another saga, seq or field (docs/adr/0019-erasure.md §3)."""
    DATA_KEY_NOT_FOUND = "data key not found"
    """A sealed event of a saga with no data key in the key store (sealed against another)."""
    KEK_NOT_HELD = "key-encryption key not held"
    """A sealed event of a saga whose data key is wrapped under a key-encryption key this
    archive does not hold."""
    UNSIGNED_DECISION = "unsigned_decision"
    """An ``APPROVED`` without the approvals service's signature (a pinned key is set)."""
    BAD_DECISION_SIGNATURE = "bad_decision_signature"
    """A decision whose signature does not verify against the pinned approvals key."""
    UNKNOWN_DECISION_KEY = "unknown_decision_key"
    """A decision signed by a key that is not pinned."""
    MALFORMED_DECISION_SIGNATURE = "malformed_decision_signature"
    """A decision whose signature attribute (or request reference) cannot be read."""
    UNREGISTERED_WRITER = "unregistered_writer"
    """The event's writer is not in the writer registry (per-writer signing is on)."""
    UNSIGNED_WRITER = "unsigned_writer"
    """A registered writer's event without its signature header."""
    BAD_WRITER_SIGNATURE = "bad_writer_signature"
    """The writer's signature does not verify."""


@dataclass(frozen=True, kw_only=True)
class RawEvent:
    """A message as read from Kafka, before decoding."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] | None = None
    """The message's headers, when the archiver checks writers' signatures."""


@dataclass(kw_only=True)
class BatchReport:
    """What one archived batch did."""

    archived: int = 0
    duplicates: int = 0
    quarantined: dict[QuarantineReason, int] = field(default_factory=dict)
    attempts: int = 1
    seconds: float = 0.0
    """Wall time of the whole batch."""
    check_seconds: float = 0.0
    """Of which decoding and hashing (before the transaction)."""

    @property
    def quarantined_total(self) -> int:
        """Events quarantined, whatever the reason."""
        return sum(self.quarantined.values())


class _HeadConflictError(Exception):
    """Another archiver moved a head we read; the batch is re-classified and retried."""


@dataclass(frozen=True)
class _Refusal:
    reason: QuarantineReason
    detail: str
    event: RawEvent
    saga_id: str | None = None
    seq: int | None = None


_SEP = "\x1f"


def _texts(values: Sequence[str]) -> tuple[str, object]:
    """A text[] parameter as (SQL, value).  One joined string when no value holds the
    separator: psycopg dumps a Python list element by element, which costs more than the
    statement itself for a batch's thousand saga ids."""
    if all(_SEP not in v for v in values):
        return "string_to_array(%s, chr(31))", _SEP.join(values)
    return "%s::text[]", list(values)


def _ints(values: Sequence[int], cast: str = "bigint") -> tuple[str, object]:
    """An integer array parameter as (SQL, value), as :func:`_texts`."""
    return f"string_to_array(%s, ',')::{cast}[]", ",".join(map(str, values))


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


def _month_key(us: int) -> int:
    t = time.gmtime(us // 1_000_000)
    return t.tm_year * 100 + t.tm_mon


class BatchArchiver:
    """Archives batches of raw journal events into one Postgres archive.

    Holds one connection (reopened after a loss) and, per batch only, the heads of the sagas
    in the batch: memory does not grow with the number of sagas.

    Args:
        conninfo: libpq connection string of the archive (its search_path picks the schema).
        consumer_group: the name offsets are stored under.
        decode: bytes to entry; defaults to the journal's Avro wire format.
        retries: attempts per batch when the database goes away (then the error is raised).
        retry_delay: seconds between attempts (doubling, capped at 5 s).
        authorship: who may write (decision signatures, the writer registry); ``None``
            checks neither.
        keys: the key service (docs/adr/0019-erasure.md): a sealed event's data is opened
            into the value columns beside its commitments (without it, or for an erased saga,
            the commitments alone are stored); a sealed field that does not authenticate is
            quarantined as ``authentication failed``.  Not with ``decode``.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        consumer_group: str,
        decode: Decoder | None = None,
        retries: int = 20,
        retry_delay: float = 0.2,
        authorship: Authorship | None = None,
        keys: FieldSealer | None = None,
    ) -> None:
        if keys is not None and decode is not None:
            raise ValueError("keys open the journal's own wire format: give keys or decode")
        self._conninfo = conninfo
        self._authorship = authorship
        self.consumer_group = consumer_group
        self._decode = decode if decode is not None else _avro_decoder(keys)
        # The journal's own wire format is checked from its decoded record's fields; a
        # decoder given by the caller goes through JournalEntry (the reference path).
        self._fields = _avro_record_decoder() if decode is None else None
        # And first, where it is installed, by the compiled module, for the current schema.
        self._native_row = _native_archive_row() if decode is None else None
        self._prefix = _current_prefix() if self._native_row is not None else b""
        self._retries = retries
        self._retry_delay = retry_delay
        self._conn: psycopg.Connection | None = None
        self._months: set[int] = set()

    # --- connection ---------------------------------------------------------------------------
    def connection(self) -> psycopg.Connection:
        """The open connection, reconnecting if it was lost."""
        if self._conn is None or self._conn.closed:
            with mapped_errors("connect to the archive database"):
                self._conn = psycopg.connect(self._conninfo, connect_timeout=10)
            self._months.clear()
        return self._conn

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None
        self._months.clear()

    # --- offsets ------------------------------------------------------------------------------
    def stored_offsets(self, topic: str) -> dict[int, int]:
        """The next offset to read per partition of ``topic``, as stored with the rows."""
        conn = self.connection()
        with mapped_errors("read stored offsets"), conn.transaction():
            rows = conn.execute(
                "SELECT kafka_partition, next_offset FROM archive_consumer_offset"
                " WHERE consumer_group = %s AND topic = %s",
                (self.consumer_group, topic),
            ).fetchall()
        return {int(p): int(o) for p, o in rows}

    # --- archiving ----------------------------------------------------------------------------
    def archive(self, batch: Sequence[RawEvent]) -> BatchReport:
        """Archive ``batch`` (Kafka order) in one transaction, retrying if the database goes away.

        Raises:
            PersistenceUnavailableError: the database stayed away for every attempt.
            PersistenceError: the database refused the batch for another reason.
        """
        started = time.perf_counter()
        # Decoding and hashing need no database: done before the transaction, kept short.
        decoded = [self._decode_one(ev) for ev in batch]
        checked = time.perf_counter()
        delay = self._retry_delay
        attempt = 0
        while True:
            attempt += 1
            try:
                report = self._archive_once(batch, decoded)
            except (PersistenceUnavailableError, _HeadConflictError) as exc:
                self._drop_connection()
                if attempt >= self._retries:
                    if isinstance(exc, _HeadConflictError):
                        raise PersistenceError(
                            "archive heads kept moving under this batch"
                        ) from exc
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            except PersistenceError as exc:
                self._drop_connection()
                if isinstance(exc.__cause__, psycopg.errors.CheckViolation) and attempt == 1:
                    # "no partition for row": retention dropped a month this process had
                    # cached as existing.  The cache is gone with the connection; retry.
                    continue
                if (
                    isinstance(exc.__cause__, psycopg.errors.UniqueViolation)
                    and attempt < self._retries
                ):
                    # Another archiver committed some of these rows first; re-classifying
                    # finds them archived (duplicates).
                    time.sleep(delay)
                    continue
                raise
            report.attempts = attempt
            report.seconds = time.perf_counter() - started
            report.check_seconds = checked - started
            return report

    def _decode_one(self, ev: RawEvent) -> _Checked | _Refusal:
        checked = None
        native = self._native_row
        if native is not None and type(ev.value) is bytes and type(ev.key) in (bytes, NoneType):
            row = native(self._prefix, ev.key, ev.value, ev.topic, ev.partition, ev.offset)
            if row is not None:
                checked = _Checked(row)
        if checked is None and self._fields is not None:
            checked = _checked_from_record(ev, self._fields)
        if checked is None:
            # Anything the record path did not accept is decided (and explained) here.
            item = self._decode_entry(ev)
            if isinstance(item, _Refusal):
                return item
            checked = _Checked(_journal_row(item, ev.topic, ev.partition, ev.offset))
        if self._authorship is not None:
            refused = self._authorship.check(checked.row, ev.headers)
            if refused is not None:
                reason, detail = refused
                return _Refusal(QuarantineReason(reason), detail, ev, checked.saga_id, checked.seq)
        return checked

    def _decode_entry(self, ev: RawEvent) -> JournalEntry | _Refusal:
        if ev.value is None:
            return _Refusal(QuarantineReason.UNDECODABLE, "message has no value (tombstone)", ev)
        try:
            entry = self._decode(ev.value)
        except UnopenableError as exc:
            # This saga's key, not the archive's: the event's fate (one reason per cause).
            known = exc.reason in QuarantineReason.__members__.values()
            reason = QuarantineReason(exc.reason) if known else QuarantineReason.UNDECODABLE
            return _Refusal(reason, exc.message, ev, exc.saga_id, exc.seq)
        except SagacityError as exc:
            return _Refusal(QuarantineReason.UNDECODABLE, exc.message, ev)
        except Exception as exc:
            return _Refusal(QuarantineReason.UNDECODABLE, f"{type(exc).__name__}: {exc}", ev)
        if ev.key != entry.saga_id.encode("utf-8"):
            # Readers select a saga's events by key: an event keyed otherwise is in no chain.
            return _Refusal(
                QuarantineReason.FOREIGN,
                "the message key is not the saga its body names",
                ev,
                entry.saga_id,
                entry.seq,
            )
        if not _MIN_US <= entry.recorded_at_us < _MAX_US:
            return _Refusal(
                QuarantineReason.BAD_TIME,
                f"event time {entry.recorded_at_us} us is outside 1970..9999",
                ev,
                entry.saga_id,
                entry.seq,
            )
        # Content first, as sagacity.chain.verify does: an event that does not hash to its own
        # hash is "edited" wherever it would go.
        try:
            recomputed = compute_hash(entry.prev_hash, entry, seq=entry.seq)
        except SagacityError as exc:
            return _Refusal(
                QuarantineReason.EDITED,
                f"entry cannot be hashed: {exc.message}",
                ev,
                entry.saga_id,
                entry.seq,
            )
        if recomputed != entry.hash:
            return _Refusal(
                QuarantineReason.EDITED,
                "content does not match its recorded hash",
                ev,
                entry.saga_id,
                entry.seq,
            )
        return entry

    def _archive_once(
        self, batch: Sequence[RawEvent], decoded: Sequence[_Checked | _Refusal]
    ) -> BatchReport:
        conn = self.connection()
        report = BatchReport()
        with mapped_errors("archive a batch"), conn.transaction():
            cur = conn.cursor()
            saga_ids = sorted({d.saga_id for d in decoded if isinstance(d, _Checked)})
            heads: dict[str, tuple[int, str]] = {}
            if saga_ids:
                ids_sql, ids = _texts(saga_ids)
                for saga_id, seq, head_hash in cur.execute(
                    "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"  # noqa: S608
                    f" WHERE saga_id = ANY({ids_sql})",
                    (ids,),
                ):
                    heads[saga_id] = (int(seq), head_hash)
            known = dict(heads)
            accepted: list[_Checked] = []
            in_batch: dict[tuple[str, int], str] = {}
            refusals: list[_Refusal] = []
            for ev, item in zip(batch, decoded, strict=True):
                if isinstance(item, _Refusal):
                    refusals.append(item)
                    continue
                verdict = self._classify(cur, item, heads, in_batch)
                if verdict is None:
                    accepted.append(item)
                    heads[item.saga_id] = (item.seq, item.hash)
                    in_batch[(item.saga_id, item.seq)] = item.hash
                elif verdict is _DUPLICATE:
                    report.duplicates += 1
                else:
                    assert isinstance(verdict, tuple)
                    reason, detail = verdict
                    refusals.append(_Refusal(reason, detail, ev, item.saga_id, item.seq))
            if accepted:
                # One month lookup per distinct second is plenty (events of a batch cluster).
                seconds = {e.recorded_at_us // 1_000_000: e.recorded_at_us for e in accepted}
                self._ensure_months(cur, {_month_key(us): us for us in seconds.values()})
                with cur.copy(_COPY_JOURNAL) as copy:
                    write_row = copy.write_row
                    for e in accepted:
                        write_row(e.row)
                self._move_heads(cur, known, heads)
            if refusals:
                with cur.copy(_COPY_QUARANTINE) as copy:
                    for r in refusals:
                        copy.write_row(
                            (
                                r.reason.value,
                                r.detail,
                                r.saga_id,
                                r.seq,
                                r.event.topic,
                                r.event.partition,
                                r.event.offset,
                                r.event.key,
                                r.event.value,
                            )
                        )
                        report.quarantined[r.reason] = report.quarantined.get(r.reason, 0) + 1
            self._store_offsets(cur, batch)
        report.archived = len(accepted)
        return report

    def _classify(
        self,
        cur: psycopg.Cursor,
        entry: _Checked,
        heads: dict[str, tuple[int, str]],
        in_batch: dict[tuple[str, int], str],
    ) -> tuple[QuarantineReason, str] | object | None:
        head_seq, head_hash = heads.get(entry.saga_id, (0, GENESIS_HASH))
        if entry.seq <= head_seq:
            if entry.seq == head_seq:
                archived_hash: str | None = head_hash
            elif (entry.saga_id, entry.seq) in in_batch:
                archived_hash = in_batch[(entry.saga_id, entry.seq)]
            else:
                row = cur.execute(
                    "SELECT hash FROM side_effect_journal WHERE saga_id = %s AND seq = %s",
                    (entry.saga_id, entry.seq),
                ).fetchone()
                archived_hash = row[0] if row else None
            if archived_hash == entry.hash:
                return _DUPLICATE
            return (
                QuarantineReason.FORK,
                f"seq {entry.seq} is already archived with hash "
                f"{(archived_hash or '?')[:16]}…; this event has {entry.hash[:16]}…",
            )
        if entry.seq > head_seq + 1:
            return (
                QuarantineReason.GAP,
                f"archived head is seq {head_seq}; seq {head_seq + 1} has not been seen",
            )
        if entry.prev_hash != head_hash:
            if entry.seq == 1:
                return (QuarantineReason.WRONG_GENESIS, "seq 1 does not start at the genesis hash")
            return (
                QuarantineReason.BROKEN_LINK,
                f"previous hash {entry.prev_hash[:16]}… is not seq {head_seq}'s {head_hash[:16]}…",
            )
        return None

    def _ensure_months(self, cur: psycopg.Cursor, months: dict[int, int]) -> None:
        """Create the month partitions the batch needs (``months``: month -> a time in it)."""
        for month, at_us in sorted(months.items()):
            if month not in self._months:
                cur.execute("SELECT sgc_ensure_month(%s)", (at_us,))
        # Trusted only once committed: on any failure the connection and this cache are dropped.
        self._months |= months.keys()

    def _move_heads(
        self,
        cur: psycopg.Cursor,
        before: dict[str, tuple[int, str]],
        after: dict[str, tuple[int, str]],
    ) -> None:
        moved = [
            (s, before[s][0], *after[s]) for s in after if s in before and after[s] != before[s]
        ]
        new = [(s, *after[s]) for s in after if s not in before]
        # Only constant SQL fragments are interpolated below; values are bound parameters.
        if moved:
            cols = [
                _texts([m[0] for m in moved]),
                _ints([m[1] for m in moved]),
                _ints([m[2] for m in moved]),
                _texts([m[3] for m in moved]),
            ]
            cur.execute(
                "UPDATE archive_saga_head h SET head_seq = u.seq, head_hash = u.hash,"  # noqa: S608
                f" updated_at = now() FROM unnest({', '.join(c[0] for c in cols)})"
                "   AS u(saga_id, old_seq, seq, hash)"
                " WHERE h.saga_id = u.saga_id AND h.head_seq = u.old_seq",
                [c[1] for c in cols],
            )
            if cur.rowcount != len(moved):
                raise _HeadConflictError
        if new:
            cols = [
                _texts([n[0] for n in new]),
                _ints([n[1] for n in new]),
                _texts([n[2] for n in new]),
            ]
            cur.execute(
                "INSERT INTO archive_saga_head (saga_id, head_seq, head_hash)"  # noqa: S608
                f" SELECT * FROM unnest({', '.join(c[0] for c in cols)})"
                " ON CONFLICT (saga_id) DO NOTHING",
                [c[1] for c in cols],
            )
            if cur.rowcount != len(new):
                raise _HeadConflictError

    def _store_offsets(self, cur: psycopg.Cursor, batch: Sequence[RawEvent]) -> None:
        top: dict[tuple[str, int], int] = {}
        first: dict[tuple[str, int], int] = {}
        for ev in batch:
            key = (ev.topic, ev.partition)
            top[key] = max(top.get(key, -1), ev.offset)
            first[key] = min(first.get(key, ev.offset), ev.offset)
        if not top:
            return
        # keys_checked_from: from where on this partition's rows were archived by a release
        # that refuses foreign keys (set once, when the partition is first archived).
        cur.execute(
            "INSERT INTO archive_consumer_offset (consumer_group, topic, kafka_partition,"
            " next_offset, keys_checked_from)"
            " SELECT %s, * FROM unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[])"
            " ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE"
            " SET next_offset = GREATEST(archive_consumer_offset.next_offset,"
            " excluded.next_offset), updated_at = now()",
            (
                self.consumer_group,
                [k[0] for k in top],
                [k[1] for k in top],
                [o + 1 for o in top.values()],
                [first[k] for k in top],
            ),
        )


_DUPLICATE = object()


def _avro_decoder(keys: FieldSealer | None = None) -> Decoder:
    from sagacity.schemas import decode_entry

    if keys is None:
        return decode_entry
    return functools.partial(decode_entry, keys=keys)


RecordDecoder = Callable[[bytes], dict[str, Any]]

NativeRow = Callable[[bytes, bytes | None, bytes, str, int, int], tuple[Any, ...] | None]
"""``sagacity_native.archive_row``: (prefix, key, value, topic, partition, offset) to the row
:func:`_checked_from_record` would build, or ``None`` to leave the event to the Python paths."""


def _native_archive_row() -> NativeRow | None:
    """The compiled ingest check (docs/adr/0013-compiled-hot-path.md), unless it is not
    installed or ``SAGACITY_NATIVE=0``."""
    function: NativeRow | None = native("archive_row")
    return function


def _current_prefix() -> bytes:
    """The first bytes of a message of the current schema: marker and fingerprint."""
    from sagacity.schemas._codec import MAGIC, current_schema

    return MAGIC + current_schema().fingerprint


def _avro_record_decoder() -> RecordDecoder:
    from sagacity.schemas._codec import decode_record

    return decode_record


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
        record = decode_record(value)
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
            or ev.key != saga_id.encode("utf-8")  # lone surrogates raise: left to the reference
            # Form 2 (docs/adr/0019-erasure.md), or form 1 showing commitments: the reference.
            or record.get("form", 1) != 1
            or record.get("commitments")
            or record.get("salts")
            or record.get("sealed")
        ):
            return None
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
