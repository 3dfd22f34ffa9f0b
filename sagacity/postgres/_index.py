"""The archive as the journal readers' per-saga index (:class:`~sagacity.ports.SagaIndex`,
docs/adr/0010-saga-read-index.md).

For a saga of partition *p*, one REPEATABLE READ snapshot gives the archiver's committed offset
``C(p)`` (written in the same transactions as the rows), the saga's archived events, the
messages with its key the archiver refused below ``C(p)``, its head and its retention anchor.
Every message of *p* below ``C(p)`` went through the archiver, so a reader that re-applies the
acceptance rule to these and then reads *p* from ``C(p)`` gets the full scan's result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP as DEFAULT_GROUP
from sagacity.entries._events import GENESIS_HASH
from sagacity.errors import ArchiveSchemaError, PersistenceError
from sagacity.ports import IndexedEvent, IndexedPartition, IndexedSaga, RefusedMessage
from sagacity.postgres._archive import archive_errors as mapped_errors
from sagacity.postgres._archive import check_schema
from sagacity.postgres._archive_schema import FORMS_VERSION
from sagacity.postgres._connect import connect, with_search_path
from sagacity.postgres._rows import FORM_COLUMNS, ROW_COLUMNS, entry_of_row

log = logging.getLogger("sagacity.reader")

"""The archiver's default consumer group (``sagacity serve archive --group``)."""

_CLOSING_END = (
    "event_type = 'COMPENSATION_REQUESTED'"
    " OR (event_type = 'SAGA_ENDED' AND result IS DISTINCT FROM 'AWAITING_APPROVAL')"
)
"""Events after which no earlier approval request of the saga is open (sagacity.gate._requests)."""


_POSITION = (
    "SELECT next_offset, keys_checked_from FROM archive_consumer_offset"
    " WHERE consumer_group = %s AND topic = %s AND kafka_partition = %s"
)
"""The archiver's position in one partition: what the archive covers (``C(p)``)."""

_MANY = 1_000
"""Sagas per statement of :meth:`PostgresSagaIndex.lookup_many`."""

_NOT_AN_ARCHIVE_SAID: set[str] = set()
_SAID_LOCK = threading.Lock()


def _say_not_an_archive(conninfo: str, error: ArchiveSchemaError) -> None:
    """Warn that ``conninfo`` reaches no archive, once per process and database.

    An agent whose database variable names a database without an archive (the archive service
    not deployed yet) reads every saga by scanning; saying so on every read, or once per
    journal built, would bury the logs.
    """
    with _SAID_LOCK:
        if conninfo in _NOT_AN_ARCHIVE_SAID:
            return
        _NOT_AN_ARCHIVE_SAID.add(conninfo)
    log.warning(
        "the read index's database holds no archive: %s; sagas are read by scanning their "
        "partitions until it does (said once per process; SAGACITY_READ_INDEX=off turns the "
        "index off)",
        error.message,
    )


def _indexed(
    position: Sequence[Any] | None,
    rows: Sequence[Sequence[Any]],
    refused: Sequence[Sequence[Any]],
    head: Sequence[Any] | None,
    anchor: Sequence[Any] | None,
) -> IndexedSaga:
    """One saga's :class:`IndexedSaga` from what a snapshot returned for it."""
    if position is None:
        return IndexedSaga(covered_to=None)
    covered_to = int(position[0])
    # Rows of an archive at schema 6 on end with the chain form's columns (FORM_COLUMNS).
    events = [
        IndexedEvent(
            topic=r[12],
            partition=int(r[13]),
            offset=int(r[14]),
            entry=entry_of_row((*r[:12], *r[15:]), forms=True) if len(r) > 15 else entry_of_row(r),
        )
        for r in rows
    ]
    return IndexedSaga(
        covered_to=covered_to,
        keys_checked_from=None if position[1] is None else int(position[1]),
        events=tuple(events),
        refused=tuple(
            RefusedMessage(offset=int(o), value=None if v is None else bytes(v))
            for o, v in refused
            if int(o) < covered_to
        ),
        head=None if head is None else (int(head[0]), str(head[1])),
        base_seq=0 if anchor is None else int(anchor[0]),
        base_hash=GENESIS_HASH if anchor is None else str(anchor[1]),
    )


class PostgresSagaIndex:
    """:class:`sagacity.ports.SagaIndex` on a Postgres archive; thread-safe.

    One connection, opened on first use and reopened after a loss; each lookup is one
    read-only REPEATABLE READ transaction (five statements, pipelined).  After a failure to
    connect (or to find an archive) the same error is raised without trying again for
    ``retry_s`` seconds, so readers falling back to the scan do not each wait for a connect.

    Args:
        conninfo: libpq URL or conninfo of the archive (its search_path picks the schema).
        consumer_group: the archiver's consumer group (``sagacity serve archive --group``,
            ``SAGACITY_ARCHIVE_GROUP``), whose committed offsets say what the archive covers.
        schema: the schema holding the archive (default: the connection's search_path).
        timeout: connect timeout in seconds.
        retry_s: how long a connection failure is remembered.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str | None = None,
        consumer_group: str = DEFAULT_GROUP,
        timeout: float = 5.0,
        retry_s: float = 5.0,
    ) -> None:
        self._conninfo = with_search_path(conninfo, schema)
        self.consumer_group = consumer_group
        self._timeout = timeout
        self._retry_s = retry_s
        self._failed: tuple[float, PersistenceError] | None = None
        self._conn: psycopg.Connection | None = None
        self._forms = False  # the archive holds the chain form's columns (schema 6 on)
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        if self._failed is not None and time.monotonic() < self._failed[0] + self._retry_s:
            error = self._failed[1]
            raise type(error)(f"{error.message} (not retried for {self._retry_s:g}s)")
        try:
            conn = connect(
                self._conninfo,
                autocommit=True,
                timeout=self._timeout,
                action="connect to the archive (read index)",
            )
            try:
                self._forms = check_schema(conn) >= FORMS_VERSION
            except ArchiveSchemaError as exc:
                conn.close()
                _say_not_an_archive(self._conninfo, exc)
                raise
            except BaseException:
                conn.close()
                raise
        except PersistenceError as exc:
            self._failed = (time.monotonic(), exc)
            raise
        self._failed = None
        self._conn = conn
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def lookup(self, topic: str, partition: int, saga_id: str) -> IndexedSaga:
        """See :meth:`sagacity.ports.SagaIndex.lookup`.

        Raises:
            PersistenceUnavailableError: the database cannot be reached.
            ArchiveSchemaError: the connection does not reach an archive.
            SerializationError: an archived row is malformed.
        """
        with self._lock:
            try:
                return self._lookup(topic, partition, saga_id)
            except BaseException:
                self._drop()
                raise

    def _lookup(self, topic: str, partition: int, saga_id: str) -> IndexedSaga:
        return self._lookup_many(topic, partition, [saga_id])[saga_id]

    def lookup_many(
        self, topic: str, partition: int, saga_ids: Sequence[str]
    ) -> dict[str, IndexedSaga]:
        """:meth:`lookup` of every saga in ``saga_ids`` (all of ``partition``), in one snapshot
        and five statements per thousand sagas instead of five per saga.

        Raises:
            PersistenceUnavailableError / ArchiveSchemaError / SerializationError: as
                :meth:`lookup`.
        """
        with self._lock:
            try:
                return self._lookup_many(topic, partition, sorted(set(saga_ids)))
            except BaseException:
                self._drop()
                raise

    def _lookup_many(
        self, topic: str, partition: int, saga_ids: list[str]
    ) -> dict[str, IndexedSaga]:
        conn = self._connection()
        out: dict[str, IndexedSaga] = {}
        with mapped_errors("read the archive (read index)"), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            offsets = None
            position: Sequence[Any] | None = None
            for start in range(0, len(saga_ids), _MANY):
                chunk = saga_ids[start : start + _MANY]
                keys = [s.encode("utf-8") for s in chunk]
                with conn.pipeline():
                    if offsets is None:  # with the first chunk: one round trip for one saga
                        offsets = conn.execute(_POSITION, (self.consumer_group, topic, partition))
                    found_rows = conn.execute(
                        f"SELECT {ROW_COLUMNS}, topic, kafka_partition, kafka_offset"  # noqa: S608
                        f"{FORM_COLUMNS if self._forms else ''}"
                        " FROM side_effect_journal WHERE saga_id = ANY(%s)"
                        " ORDER BY saga_id, seq, archive_id",
                        (chunk,),
                    )
                    found_refused = conn.execute(
                        "SELECT raw_key, kafka_offset, raw_value FROM archive_quarantine"
                        " WHERE raw_key = ANY(%s) AND topic = %s AND kafka_partition = %s"
                        " ORDER BY raw_key, kafka_offset, id",
                        (keys, topic, partition),
                    )
                    found_heads = conn.execute(
                        "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
                        " WHERE saga_id = ANY(%s)",
                        (chunk,),
                    )
                    found_anchors = conn.execute(
                        "SELECT DISTINCT ON (saga_id) saga_id, seq, hash"
                        " FROM archive_retention_anchor WHERE saga_id = ANY(%s)"
                        " ORDER BY saga_id, seq DESC",
                        (chunk,),
                    )
                if start == 0:
                    position = offsets.fetchone()
                rows: dict[str, list[Any]] = {}
                refused: dict[bytes, list[Any]] = {}
                for r in found_rows.fetchall():
                    rows.setdefault(r[0], []).append(r)
                for k, o, v in found_refused.fetchall():
                    refused.setdefault(bytes(k), []).append((o, v))
                heads = {r[0]: r[1:] for r in found_heads.fetchall()}
                anchors = {r[0]: r[1:] for r in found_anchors.fetchall()}
                for saga_id, key in zip(chunk, keys, strict=True):
                    out[saga_id] = _indexed(
                        position,
                        rows.get(saga_id, []),
                        refused.get(key, []),
                        heads.get(saga_id),
                        anchors.get(saga_id),
                    )
        return out

    def sagas_with_pending_requests(self, topic: str, partition: int) -> IndexedPartition:
        """See :meth:`sagacity.ports.SagaIndex.sagas_with_pending_requests`.

        A superset: sagas of the partition with an archived ``AWAITING_APPROVAL`` whose last
        archived event does not end them, and sagas with an event refused for its time (which
        a reader may accept although the archiver did not).
        """
        with self._lock:
            try:
                return self._pending(topic, partition)
            except BaseException:
                self._drop()
                raise

    def _pending(self, topic: str, partition: int) -> IndexedPartition:
        conn = self._connection()
        with mapped_errors("read the archive (read index)"), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            position = conn.execute(_POSITION, (self.consumer_group, topic, partition)).fetchone()
            if position is None:
                return IndexedPartition(covered_to=None)
            params: dict[str, Any] = {"topic": topic, "partition": partition}
            gated = conn.execute(
                "SELECT DISTINCT j.saga_id FROM side_effect_journal j"  # noqa: S608
                " WHERE j.topic = %(topic)s AND j.kafka_partition = %(partition)s"
                " AND j.event_type = 'AWAITING_APPROVAL' AND NOT EXISTS ("
                "  SELECT 1 FROM side_effect_journal l WHERE l.saga_id = j.saga_id"
                f"  AND l.seq > j.seq AND ({_CLOSING_END}))",
                params,
            ).fetchall()
            odd = conn.execute(
                "SELECT DISTINCT raw_key FROM archive_quarantine"
                " WHERE topic = %(topic)s AND kafka_partition = %(partition)s"
                " AND reason = 'bad_time' AND raw_key IS NOT NULL",
                params,
            ).fetchall()
        sagas = {str(r[0]) for r in gated}
        sagas |= {bytes(r[0]).decode("utf-8", "replace") for r in odd}
        return IndexedPartition(covered_to=int(position[0]), sagas=tuple(sorted(sagas)))

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._drop()
