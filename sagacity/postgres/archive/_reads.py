"""The archived chains as the archive service and its tools read them: the ports
:class:`~sagacity.ports.ArchivedHeads` (a sweep's candidates),
:class:`~sagacity.ports.ArchivedHashes` (a replay's comparison) and
:class:`~sagacity.ports.ArchivedEvents` (the events a saga's writers are folded from) and
:class:`~sagacity.ports.DestroyedKeyReads` (the destroyed data keys beside the archive) and
:class:`~sagacity.ports.HeadFindings` (the archiver's findings of heads moved by others) ,
:class:`~sagacity.ports.SagaRows` (a saga's rows for an audit's reference path) and
:class:`~sagacity.ports.RetentionStreams` (the signed retention records and their anchors) on
one connection (or the cursor of the caller's transaction)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg

from sagacity.entries._events import JournalEntry
from sagacity.ports import (
    ArchivedHead,
    DestroyedKey,
    DestroyedKeys,
    ErasedEvent,
    StoredFinding,
    WriterEvent,
)
from sagacity.postgres._rows import FORM_COLUMNS, ROW_COLUMNS, entry_of_row
from sagacity.postgres.archive._db import check_schema, mapped_errors
from sagacity.postgres.archive._findings import write_findings
from sagacity.privacy._withheld import ERASURE_EVENT

RECORD_COLUMNS = (
    "partition_name, range_from_us, range_to_us, row_count, export_sha256, anchor_count,"
    " anchors_root, signed_at_us, key_id, signature"
)
"""The select list of a retention record (``archive_retention``), as the archive service's
``record_of_row`` reads it."""

KEY_TABLE = "sagacity_data_keys"
"""The key store's table (:mod:`sagacity.postgres._keys`), read when it is in the same
schema as the archive."""


class PostgresArchiveReads:
    """Reads of the archive on ``conn`` (the caller's connection, which it closes; or the
    cursor of its transaction, for the reads that check no schema)."""

    def __init__(self, conn: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> None:
        self._on = conn

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        if isinstance(self._on, psycopg.Cursor):
            return self._on.connection
        return self._on

    def quiet_heads(
        self, *, topic: str, recorded_before_us: int, excluding: Collection[str], limit: int
    ) -> list[ArchivedHead]:
        """The heads of ``topic``'s sagas recorded before ``recorded_before_us`` whose event
        type is not in ``excluding``, oldest first, at most ``limit``."""
        conn = self._conn
        check_schema(conn)
        with mapped_errors("find quiet sagas"):
            rows = conn.execute(
                "SELECT h.saga_id, h.head_seq, j.event_type, j.recorded_at_us"
                " FROM archive_saga_head h JOIN side_effect_journal j"
                "   ON j.saga_id = h.saga_id AND j.seq = h.head_seq"
                " WHERE j.topic = %s AND j.recorded_at_us < %s AND NOT (j.event_type = ANY(%s))"
                " ORDER BY j.recorded_at_us LIMIT %s",
                (topic, recorded_before_us, sorted(excluding), limit),
            ).fetchall()
        return [
            ArchivedHead(saga_id=saga, seq=int(seq), event_type=kind, recorded_at_us=int(at))
            for saga, seq, kind, at in rows
        ]

    def archived_hashes(
        self, *, topic: str, saga_id: str | None = None
    ) -> Iterator[tuple[str, int, str]]:
        """``(saga_id, seq, hash)`` of every archived event of ``topic`` (of one saga with
        ``saga_id``), read in one transaction."""
        conn = self._conn
        check_schema(conn)
        # Only the topic's rows: several journal topics may share one archive.
        where = "WHERE topic = %s" + (" AND saga_id = %s" if saga_id is not None else "")
        with mapped_errors("read the archive for replay"), conn.transaction():
            rows = conn.execute(
                f"SELECT saga_id, seq, hash FROM side_effect_journal {where}",  # noqa: S608
                (topic, saga_id) if saga_id is not None else (topic,),
            ).fetchall()
        for sid, seq, h in rows:
            yield str(sid), int(seq), str(h)

    def writer_events(
        self, saga_ids: Collection[str], event_types: Collection[str]
    ) -> list[WriterEvent]:
        """The archived events of ``saga_ids`` whose type is in ``event_types``, by saga, each
        saga's in seq order (the attributes the writers' rule reads: ``writer``,
        ``handoff``)."""
        rows = self._on.execute(
            "SELECT saga_id, event_type, actor, attributes->>'writer', attributes->>'handoff'"
            " FROM side_effect_journal WHERE saga_id = ANY(%s) AND event_type = ANY(%s)"
            " ORDER BY saga_id, seq",
            (sorted(saga_ids), sorted(event_types)),
        ).fetchall()
        return [
            WriterEvent(
                saga_id=saga_id,
                event_type=event_type,
                actor=actor,
                attributes={k: v for k, v in (("writer", writer), ("handoff", handoff)) if v},
            )
            for saga_id, event_type, actor, writer, handoff in rows
        ]

    def entry_of(self, row: Sequence[Any], *, forms: bool) -> JournalEntry:
        """The entry an archived row stores (:func:`sagacity.postgres._rows.entry_of_row`)."""
        return entry_of_row(row, forms=forms)

    def archived_entries(self, up_to: Mapping[str, int]) -> list[JournalEntry]:
        """The archived entries of each saga of ``up_to`` with a seq at most its bound, by
        saga, each saga's in seq then archive order.

        Raises:
            SerializationError: a row is not an entry.
        """
        if not up_to:
            return []
        rows = self._on.execute(
            f"SELECT {ROW_COLUMNS}{FORM_COLUMNS} FROM side_effect_journal"  # noqa: S608
            " WHERE saga_id = ANY(%s) ORDER BY saga_id, seq, archive_id",
            (sorted(up_to),),
        ).fetchall()
        return [entry_of_row(row, forms=True) for row in rows if int(row[1]) <= up_to[row[0]]]

    def destroyed_keys(
        self, saga_id: str | None = None, *, with_erased: bool = False
    ) -> DestroyedKeys:
        """The destroyed keys (of ``saga_id``, or all) when the key table is beside the
        archive and readable; with ``with_erased``, their sagas' archived ``ERASED`` rows, in
        the same transaction (rolled back after, the connection not in autocommit)."""
        conn = self._conn
        check_schema(conn)
        # Only constant fragments are interpolated; the saga id is a bound parameter.
        one = "AND k.saga_id = %(s)s" if saga_id is not None else ""
        with mapped_errors("read the data keys"):
            found = conn.execute(
                "SELECT t IS NOT NULL, t IS NOT NULL AND has_table_privilege(t, 'SELECT') FROM"
                " (SELECT to_regclass(format('%%I.%%I', current_schema(), %(t)s::text)) t) k",
                {"t": KEY_TABLE},
            ).fetchone()
            readable = found is not None and bool(found[1])
            result = DestroyedKeys(hidden=found is not None and bool(found[0]) and not readable)
            if readable:
                rows = conn.execute(
                    "SELECT k.saga_id, k.erased_at, k.erased_by"  # noqa: S608
                    " FROM sagacity_data_keys k"
                    f' WHERE k.erased_at IS NOT NULL {one} ORDER BY k.saga_id COLLATE "C"',
                    {"s": saga_id},
                ).fetchall()
                keys = tuple(
                    DestroyedKey(saga_id=r[0], erased_at=r[1], erased_by=r[2]) for r in rows
                )
                erased = self._erased([k.saga_id for k in keys]) if with_erased else ()
                result = DestroyedKeys(readable=True, keys=keys, erased=erased)
        if not conn.autocommit:
            conn.rollback()
        return result

    def _erased(self, saga_ids: list[str]) -> tuple[ErasedEvent, ...]:
        if not saga_ids:
            return ()
        rows = self._conn.execute(
            "SELECT saga_id, seq, event_type, prev_hash, actor, recorded_at_us, attributes::text"
            " FROM side_effect_journal WHERE saga_id = ANY(%s) AND event_type = %s",
            (saga_ids, ERASURE_EVENT.value),
        ).fetchall()
        return tuple(
            ErasedEvent(
                saga_id=str(r[0]),
                seq=int(r[1]),
                event_type=str(r[2]),
                prev_hash=str(r[3]),
                actor=r[4],
                recorded_at_us=int(r[5]),
                attributes=r[6],
            )
            for r in rows
        )

    @contextmanager
    def finding(self, action: str) -> Iterator[_FindingsUnit]:
        """One transaction reading the heads and writing the findings (errors mapped)."""
        conn = self._conn
        with mapped_errors(action), conn.transaction():
            yield _FindingsUnit(conn)

    def saga_rows(self, saga_id: str, *, forms: bool) -> list[tuple[Any, ...]]:
        """The saga's rows (:data:`ROW_COLUMNS`, then with ``forms`` :data:`FORM_COLUMNS`) in
        the order archived, in the caller's transaction."""
        columns = ROW_COLUMNS + (FORM_COLUMNS if forms else "")
        return self._on.execute(
            f"SELECT {columns} FROM side_effect_journal"  # noqa: S608
            " WHERE saga_id = %s ORDER BY archive_id",
            (saga_id,),
        ).fetchall()

    @contextmanager
    def retention_streams(
        self, *, saga_id: str | None, fetch: int
    ) -> Iterator[tuple[Iterator[tuple[Any, ...]], Iterator[tuple[Any, ...]]]]:
        """The retention records (:data:`RECORD_COLUMNS`) by partition name, and their anchors
        ``(partition_name, leaf_index, saga_id, seq, hash)`` by partition name then leaf index
        (of one saga's partitions with ``saga_id``): two streams of ``fetch`` rows a fetch,
        read in the caller's snapshot, closed on leaving."""
        conn = self._conn
        scope = (
            " WHERE partition_name IN (SELECT partition_name FROM archive_retention_anchor"
            " WHERE saga_id = %(s)s)"
            if saga_id is not None
            else ""
        )
        with ExitStack() as stack:
            record_cur = stack.enter_context(conn.cursor(name="sgc_audit_records"))
            anchor_cur = stack.enter_context(conn.cursor(name="sgc_audit_anchors"))
            record_cur.itersize = anchor_cur.itersize = fetch
            record_cur.execute(
                f"SELECT {RECORD_COLUMNS} FROM archive_retention{scope}"  # noqa: S608
                ' ORDER BY partition_name COLLATE "C"',
                {"s": saga_id},
            )
            anchor_cur.execute(
                "SELECT partition_name, leaf_index, saga_id, seq, hash"  # noqa: S608
                f' FROM archive_retention_anchor{scope} ORDER BY partition_name COLLATE "C",'
                " leaf_index",
                {"s": saga_id},
            )
            yield iter(record_cur), iter(anchor_cur)


class _FindingsUnit:
    """The :class:`~sagacity.ports.FindingsUnit` of one transaction on ``conn``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def unsigned_heads(self) -> list[tuple[str, int, str]]:
        """``(saga_id, seq, hash)`` of every head past its last signed (checkpointed) one."""
        rows = self._conn.execute(
            "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
            " WHERE head_seq > checkpointed_seq"
        ).fetchall()
        return [(str(saga_id), int(seq), str(hash)) for saga_id, seq, hash in rows]

    def write_findings(self, findings: Sequence[StoredFinding]) -> None:
        """Insert ``findings`` in the transaction."""
        write_findings(self._conn.cursor(), findings)
