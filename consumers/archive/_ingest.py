"""Archiving a batch of journal events: verify each against its saga's archived head, write the
accepted ones with COPY, quarantine the rest, and store the consumer position, all in one
transaction."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from types import NoneType
from typing import TYPE_CHECKING

from sagacity.chain import compute_hash, link_break
from sagacity.consumers.archive._attest import CheckpointVerifier
from sagacity.consumers.archive._authorship import Authorship
from sagacity.consumers.archive._batchplan import BatchPlan, Table
from sagacity.consumers.archive._findings import Finding, log_findings
from sagacity.consumers.archive._ingesttypes import (
    BatchReport,
    QuarantineReason,
    RawEvent,
)
from sagacity.consumers.archive._ingesttypes import Refusal as _Refusal
from sagacity.consumers.archive._ledger import IngestLedger
from sagacity.consumers.archive._rowcheck import (
    _MAX_US,
    _MIN_US,
    JOURNAL_COLUMNS,
    Decoder,
    NativeRow,
    RecordDecoder,
    _Checked,
    _checked_from_record,
    _journal_row,
    _native_archive_row,
    _wire_decoder,
)
from sagacity.consumers.archive._sweep import moved_heads
from sagacity.consumers.archive._timewindow import TimeWindow
from sagacity.entries._events import GENESIS_HASH, JournalEntry
from sagacity.errors import (
    PersistenceError,
    PersistenceUnavailableError,
    SagacityError,
    UnopenableError,
)
from sagacity.ports import (
    ArchiveIngest,
    CheckpointSigning,
    HeadConflictError,
    IngestBatch,
    IngestRetry,
)

if TYPE_CHECKING:
    from sagacity.ports import JournalWire, Partitioner
    from sagacity.privacy._keys import KeyService

__all__ = [
    "JOURNAL_COLUMNS",
    "BatchArchiver",
    "BatchReport",
    "Decoder",
    "NativeRow",
    "QuarantineReason",
    "RawEvent",
    "RecordDecoder",
    "_checked_from_record",
    "_journal_row",
    "_native_archive_row",
    "_wire_decoder",
]


def _month_key(us: int) -> int:
    t = time.gmtime(us // 1_000_000)
    return t.tm_year * 100 + t.tm_mon


class BatchArchiver:
    """Archives batches of raw journal events into one Postgres archive.

    Holds its store (one connection, reopened after a loss) and, per batch only, the heads of
    the sagas in the batch, plus its :class:`IngestLedger` (bounded): what it read from the
    topic, the only input its signer signs.

    Args:
        store: the archive (the port :class:`~sagacity.ports.ArchiveIngest`; the Postgres
            archive's ``PostgresArchiveIngest``, made by the composition root).
        consumer_group: the name offsets are stored under.
        wire / partitioner: the journal's wire format and where its partitioner puts a key
            (the ports :class:`~sagacity.ports.JournalWire`, :class:`~sagacity.ports.Partitioner`).
        decode: bytes to entry, instead of ``wire`` (the reference path only).
        retries: attempts per batch when the database goes away (then the error is raised).
        retry_delay: seconds between attempts (doubling, capped at 5 s).
        authorship: who may write (decision signatures, the writer registry and its roles);
            ``None`` checks neither.
        keys: the key service (docs/adr/0019-erasure.md): a sealed event's data is opened
            into the value columns beside its commitments (without it, or for an erased saga,
            the commitments alone are stored); a sealed field that does not authenticate is
            quarantined as ``authentication failed``.  Not with ``decode``.
        time_window: event times accepted (others are quarantined ``time_out_of_range``);
            ``None``: any time a month partition can hold (1970-9999).
        partitions: per topic, its partition count: a message not on its key's partition
            is quarantined ``wrong_partition`` (topics not named are not checked).
        signed_keys: the archive's public signing keys: a saga this process has not read
            since it started resumes from its last head signed under one of them
            (docs/adr/0012, "The signer's input").
        ledger: what this process attested (default: a new one).
    """

    def __init__(
        self,
        store: ArchiveIngest,
        *,
        consumer_group: str,
        partitioner: Partitioner,
        wire: JournalWire | None = None,
        decode: Decoder | None = None,
        retries: int = 20,
        retry_delay: float = 0.2,
        authorship: Authorship | None = None,
        keys: KeyService | None = None,
        time_window: TimeWindow | None = None,
        partitions: Mapping[str, int] | None = None,
        signed_keys: Sequence[bytes] = (),
        ledger: IngestLedger | None = None,
    ) -> None:
        if keys is not None and decode is not None:
            raise ValueError("keys open the journal's own wire format: give keys or decode")
        self._store = store
        self._authorship = authorship
        self.consumer_group = consumer_group
        self._partitioner = partitioner
        own = wire if decode is None else None
        if own is not None:
            decode = _wire_decoder(own, keys)
        if decode is None:
            raise ValueError("give the journal's wire format (wire) or a decoder (decode)")
        self._decode = decode
        # The journal's own wire format is checked from its decoded record's fields; a
        # decoder given by the caller goes through JournalEntry (the reference path).
        self._fields = own.record if own is not None else None
        # And first, where it is installed, by the compiled module, for the current schema.
        self._native_row = _native_archive_row() if own is not None else None
        self._prefix = own.prefix if own is not None and self._native_row is not None else b""
        self._retries = retries
        self._retry_delay = retry_delay
        self._window = time_window
        self.partitions: dict[str, int] = dict(partitions or {})
        """Per topic, its partition count (the placement check)."""
        self.ledger = ledger if ledger is not None else IngestLedger()
        """What this process read from the topic: the signer's only input."""
        self._verifier = CheckpointVerifier(signed_keys)
        self._again: dict[tuple[str, int], int] = {}
        self._reported: set[tuple[str, tuple[int, str]]] = set()

    # --- store ------------------------------------------------------------------------------
    def signing(self) -> CheckpointSigning:
        """The archive's signing rounds, on the archiver's store."""
        return self._store.signing()

    def prepare(self) -> None:
        """Create or upgrade the archive's schema where it is older than this release."""
        self._store.prepare()

    def close(self) -> None:
        """Close the store's connection."""
        self._store.close()

    def _drop_connection(self) -> None:
        self._store.reset()

    # --- offsets ------------------------------------------------------------------------------
    def stored_offsets(self, topic: str) -> dict[int, int]:
        """The next offset to read per partition of ``topic``, as stored with the rows."""
        return {p: nxt for p, (nxt, _signed) in self._offsets(topic).items()}

    def start_offsets(self, topic: str) -> dict[int, int]:
        """Where to start reading each partition of ``topic`` after an assignment: the offset
        below which everything ingested was signed (docs/adr/0012, "The signer's input").

        Messages from there up to the stored next offset were archived (or quarantined) by an
        earlier process but not all signed: they are read again to re-verify them (nothing is
        written for them), so this process may sign what it re-read.
        """
        positions = self._offsets(topic)
        for partition, (nxt, signed) in positions.items():
            self._again[(topic, partition)] = nxt
            if signed >= nxt:  # nothing to read again: caught up already
                self.ledger.handled(topic, partition, nxt)
        return {p: min(nxt, signed) for p, (nxt, signed) in positions.items()}

    def _offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        return self._store.offsets(self.consumer_group, topic)

    def moved_heads(self, topic: str, held: Collection[int]) -> list[Finding]:
        """Report the sagas of ``held`` partitions whose table head moved past what this
        process read from the topic, with no round covering it (``head_moved``; written,
        logged, returned).

        Only partitions read again up to where the last process left them are looked at: the
        heads an earlier process archived there are this one's to re-read, not findings.
        """
        count = self.partitions.get(topic)
        if count is None or not held:
            return []
        handled = self.ledger.handled_offsets()
        ready = {
            p
            for p in held
            if (topic, p) not in self._again
            or handled.get((topic, p), -1) >= self._again[(topic, p)]
        }
        return moved_heads(
            self._store.head_findings(),
            self.ledger,
            partition_of=lambda saga_id: self._partitioner.partition_for(
                saga_id.encode("utf-8", "surrogatepass"), count
            ),
            ready=ready,
            reported=self._reported,
        )

    def _read_again(self, batch: Sequence[RawEvent]) -> list[bool]:
        """Per message of ``batch``: it was handled by an earlier process and is read again
        only to re-verify it."""
        if not self._again:
            return [False] * len(batch)
        again = self._again
        return [ev.offset < again.get((ev.topic, ev.partition), -1) for ev in batch]

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
                report, plan, heads = self._archive_once(batch, decoded)
            except (PersistenceUnavailableError, HeadConflictError) as exc:
                self._drop_connection()
                if attempt >= self._retries:
                    if isinstance(exc, HeadConflictError):
                        raise PersistenceError(
                            "archive heads kept moving under this batch"
                        ) from exc
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            except PersistenceError as exc:
                self._drop_connection()
                retry = self._store.retry_of(exc)
                if retry is IngestRetry.MONTH_DROPPED and attempt == 1:
                    # "no partition for row": retention dropped a month this process had
                    # cached as existing.  The cache is gone with the connection; retry.
                    continue
                if retry is IngestRetry.ROW_CONFLICT and attempt < self._retries:
                    # Another archiver committed some of these rows first; re-classifying
                    # finds them archived (duplicates).
                    time.sleep(delay)
                    continue
                raise
            # Committed: only now does the ledger learn what the batch read and attested.
            if plan is not None:
                plan.record(self.ledger, heads)
                log_findings(plan.findings)
            for (topic, partition), offset in _next_offsets(batch).items():
                self.ledger.handled(topic, partition, offset)
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
        partitions = self.partitions.get(ev.topic)
        if partitions is not None:
            wrong = self._partitioner.misplaced(ev.key, ev.partition, partitions)
            if wrong is not None:
                return _Refusal(
                    QuarantineReason.WRONG_PARTITION, wrong, ev, checked.saga_id, checked.seq
                )
        if self._window is not None:
            outside = self._window.refusal(checked.recorded_at_us)
            if outside is not None:
                return _Refusal(
                    QuarantineReason.TIME_OUT_OF_RANGE, outside, ev, checked.saga_id, checked.seq
                )
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
    ) -> tuple[BatchReport, BatchPlan | None, dict[str, tuple[int, str]]]:
        report = BatchReport()
        with self._store.batch() as unit:
            places = {
                d.saga_id: (ev.topic, ev.partition)
                for ev, d in zip(batch, decoded, strict=True)
                if isinstance(d, _Checked)
            }
            heads = unit.read_heads(sorted(places))
            known = dict(heads)
            plan = (
                BatchPlan(
                    ledger=self.ledger,
                    verifier=self._verifier,
                    unit=unit,
                    heads=heads,
                    places=places,
                    authorship=self._authorship,
                )
                if places
                else None
            )
            again = self._read_again(batch)
            report.again = sum(again)
            unmade = self._make_months(unit, decoded, again)
            accepted, refusals, report.duplicates = self._sort(
                unit, batch, decoded, again, heads, plan, unmade
            )
            if accepted:
                # The months were made before the events were sorted (_make_months).
                unit.write_rows(JOURNAL_COLUMNS, (e.row for e in accepted))
                unit.move_heads(known, heads)
            if refusals:
                for reason, times in unit.quarantine(refusals).items():
                    report.quarantined[QuarantineReason(reason)] = times
            if plan is not None and plan.findings:
                unit.write_findings(plan.findings)
                for f in plan.findings:
                    report.findings[f.reason.value] = report.findings.get(f.reason.value, 0) + 1
            self._store_offsets(unit, batch)
        report.archived = len(accepted)
        return report, plan, heads

    def _sort(
        self,
        unit: IngestBatch,
        batch: Sequence[RawEvent],
        decoded: Sequence[_Checked | _Refusal],
        read_again: Sequence[bool],
        heads: dict[str, tuple[int, str]],
        plan: BatchPlan | None,
        unmade: Mapping[int, str],
    ) -> tuple[list[_Checked], list[_Refusal], int]:
        """Classify the batch's events in order against the table's heads (moved in
        ``heads`` as events are accepted), beside the plan's walk: the events to write and
        the refusals to quarantine, and how many were duplicates."""
        archived = unit.archived_hashes(
            {
                (d.saga_id, d.seq)
                for d in decoded
                if isinstance(d, _Checked) and d.seq < heads.get(d.saga_id, (0, ""))[0]
            },
        )
        accepted: list[_Checked] = []
        refusals: list[_Refusal] = []
        duplicates = 0
        for ev, item, again in zip(batch, decoded, read_again, strict=True):
            if isinstance(item, _Checked) and not again and unmade:
                month = _month_key(item.recorded_at_us)
                if month in unmade:
                    item = _Refusal(
                        QuarantineReason.PARTITION_UNAVAILABLE,
                        unmade[month],
                        ev,
                        item.saga_id,
                        item.seq,
                    )
            if isinstance(item, _Refusal):
                if not again:
                    refusals.append(item)
                continue
            assert plan is not None
            verdict = self._classify(unit, item, heads, archived)
            if verdict is _DUPLICATE:
                duplicates += 1
                plan.observe(item, Table.HOLDS, again=again)
                continue
            if again:
                # Its fate was decided (and stored) when it was first read.
                plan.observe(item, Table.LACKS, again=again)
                continue
            if verdict is None:
                refused = plan.writer_refusal(item)
                if refused is None:
                    accepted.append(item)
                    heads[item.saga_id] = (item.seq, item.hash)
                    archived[(item.saga_id, item.seq)] = item.hash
                    plan.observe(item, Table.WRITTEN, again=again)
                    continue
                verdict = (QuarantineReason(refused[0]), refused[1])
            plan.observe(item, Table.LACKS, again=again)
            assert isinstance(verdict, tuple)
            reason, detail = verdict
            refusals.append(_Refusal(reason, detail, ev, item.saga_id, item.seq))
        return accepted, refusals, duplicates

    def _store_offsets(self, unit: IngestBatch, batch: Sequence[RawEvent]) -> None:
        """Store the batch's positions (the last statement of its transaction)."""
        unit.store_offsets(self.consumer_group, batch)

    def _classify(
        self,
        unit: IngestBatch,
        entry: _Checked,
        heads: dict[str, tuple[int, str]],
        archived: dict[tuple[str, int], str],
    ) -> tuple[QuarantineReason, str] | object | None:
        """``None`` when ``entry`` extends its saga's archived head, :data:`_DUPLICATE` when it
        is archived already, else the refusal (``archived``: hashes known at (saga, seq))."""
        head_seq, head_hash = heads.get(entry.saga_id, (0, GENESIS_HASH))
        if entry.seq <= head_seq:
            if entry.seq == head_seq:
                archived_hash: str | None = head_hash
            elif (entry.saga_id, entry.seq) in archived:
                archived_hash = archived[(entry.saga_id, entry.seq)]
            else:
                archived_hash = unit.archived_hash(entry.saga_id, entry.seq)
            if archived_hash == entry.hash:
                return _DUPLICATE
            return (
                QuarantineReason.FORK,
                f"seq {entry.seq} is already archived with hash "
                f"{(archived_hash or '?')[:16]}…; this event has {entry.hash[:16]}…",
            )
        # The reference's walk of one event past the archived head (its hash was checked when
        # it was decoded; a seq past the head's next is a gap: what follows is not read yet).
        found = link_break(
            saga_id=entry.saga_id,
            expected_seq=head_seq + 1,
            prev_hash=head_hash,
            entry_saga_id=entry.saga_id,
            entry_seq=entry.seq,
            entry_prev_hash=entry.prev_hash,
            entry_hash=entry.hash,
            recompute=lambda: entry.hash,
            stored_later=lambda seq: False,
        )
        if found is None:
            return None
        reason = QuarantineReason(found[0].value)
        if reason is QuarantineReason.GAP:
            return reason, f"archived head is seq {head_seq}; seq {head_seq + 1} has not been seen"
        if reason is QuarantineReason.WRONG_GENESIS:
            return reason, "seq 1 does not start at the genesis hash"
        return (
            reason,
            f"previous hash {entry.prev_hash[:16]}… is not seq {head_seq}'s {head_hash[:16]}…",
        )

    def _make_months(
        self,
        unit: IngestBatch,
        decoded: Sequence[_Checked | _Refusal],
        read_again: Sequence[bool],
    ) -> dict[int, str]:
        """Make the month partitions the batch's events need, each in a savepoint; the months
        that could not be made (the database refused: not a lost connection), with why.

        Events of such a month are quarantined (``partition_unavailable``): the message's
        fate, not the batch's or the service's.
        """
        seconds: dict[int, int] = {}
        for d, again in zip(decoded, read_again, strict=True):
            if isinstance(d, _Checked) and not again:
                seconds.setdefault(d.recorded_at_us // 1_000_000, d.recorded_at_us)
        return unit.make_months({_month_key(us): us for us in seconds.values()})


_DUPLICATE = object()


def _next_offsets(batch: Sequence[RawEvent]) -> dict[tuple[str, int], int]:
    """Per (topic, partition) of ``batch``, the offset after its last message."""
    top: dict[tuple[str, int], int] = {}
    for ev in batch:
        key = (ev.topic, ev.partition)
        top[key] = max(top.get(key, -1), ev.offset + 1)
    return top
