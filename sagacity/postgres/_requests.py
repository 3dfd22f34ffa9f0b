"""The approvals service's working state in PostgreSQL (:class:`~sagacity.ports.RequestStore`):
requests, their state, the attention queue, consumer offsets.

The table is a materialised view of the chain, kept so pending requests survive a restart and
can be listed without scanning the topic, and so replicas have a row to lock.  It is never
evidence: every decision and every resume reads the saga's chain through the core.

Rows are the core's fold, never SQL's: the entries of a saga the fold reads
(:func:`sagacity.gate._requests.request_input`) are kept in ``sagacity_approval_event``, and each
new one refolds the saga (:func:`sagacity.gate._requests.request_states`, approvals counted as the
resume counts them) and upserts the rows that changed, in the transaction that stores the
consumer's position (docs/adr/0022-request-projection-from-the-core-fold.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import psycopg.errors
from psycopg.rows import dict_row

from sagacity.chain._acceptance import Refusal, Tail
from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.entries._events import JournalEntry, now_micros
from sagacity.errors import DecisionInProgressError, SerializationError
from sagacity.gate._deadline_extension import counted_extensions
from sagacity.gate._requests import (
    counted_approvals,
)
from sagacity.ports import (
    OPEN_STATES,
    AttentionRow,
    GateStats,
    QuarantinedEvent,
    RequestRow,
)
from sagacity.postgres._attention import attention_rows
from sagacity.postgres._connect import connect
from sagacity.postgres._decision import PostgresDecision, deciding
from sagacity.postgres._errors import map_error, refuses_the_row
from sagacity.postgres._migrate import migrate
from sagacity.postgres._request_fold import apply_entry, row_of
from sagacity.postgres._requests_schema import COMPONENT, MIGRATIONS
from sagacity.postgres._tails import (
    REFUSED_BY_DATABASE,
    Fault,
    Tails,
    lock_saga,
    quarantine,
    quarantined,
)
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import OperatorVerifier

UNREADABLE_KEPT_EVENTS = "unreadable_kept_events"
"""The quarantine kind of an event of a saga whose kept events do not decode any more."""


def _first_line(exc: psycopg.Error) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def _constant(tail: Tail | None) -> Callable[[], Tail | None]:
    return lambda: tail


class PostgresRequestStore:
    """The working table on one PostgreSQL database.

    Args:
        dsn: a libpq conninfo or URL.
        topic: the journal topic whose requests this store holds; the rows of other topics
            in the same database are neither read nor written.
        connect_timeout: seconds to wait for a connection.
        verifier: the approvals service's decision keys: an ``APPROVED`` counts as a signature
            only when it verifies as the resume requires.  ``None``: every journaled approval
            counts (a journal only trusted writers append to).

    Every psycopg error is mapped by :mod:`sagacity.postgres._errors` (a lost connection is
    retryable), a lock another decision holds to
    :class:`~sagacity.errors.DecisionInProgressError`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        topic: str = DEFAULT_TOPIC,
        connect_timeout: float = 5.0,
        verifier: DecisionVerifier | None = None,
        journal: str | None = None,
        clock: Callable[[], int] = now_micros,
        operator: OperatorVerifier | None = None,
    ) -> None:
        self._dsn = dsn
        self.topic = topic
        self._timeout = connect_timeout
        self._counts = counted_approvals(verifier, journal)
        self._extends = counted_extensions(operator, journal=journal)
        self._clock = clock

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction (committed on success, rolled back on error)."""
        conn = connect(
            self._dsn,
            timeout=self._timeout,
            row_factory=dict_row,
            action="cannot connect to PostgreSQL",
        )
        try:
            with conn.transaction():
                yield conn
        except psycopg.errors.LockNotAvailable as exc:
            raise DecisionInProgressError(
                "another decision on this request holds its lock; retry shortly"
            ) from exc
        except psycopg.Error as exc:
            raise map_error(exc, "PostgreSQL refused the operation") from exc
        finally:
            conn.close()

    def migrate(self) -> None:
        """Create the tables and indexes if they do not exist (safe on every start)."""
        with self.connect() as conn:
            # Replicas starting together: the runner's lock keeps CREATE TABLE from racing.
            migrate(conn, COMPONENT, MIGRATIONS)
            # Rows made before requests recorded their topic belong to the service that ran.
            conn.execute(
                "UPDATE sagacity_approval_request SET topic = %s WHERE topic = ''", (self.topic,)
            )
            conn.execute("UPDATE sagacity_attention SET topic = %s WHERE topic = ''", (self.topic,))

    def ping(self) -> None:
        """Raise :class:`PersistenceError` unless the database answers."""
        with self.connect() as conn:
            conn.execute("SELECT 1")

    def apply(self, entries: Iterable[JournalEntry]) -> None:
        """Fold ``entries`` into the table in one transaction (see :func:`apply_entry`).

        Raises:
            PersistenceError: the database failed; nothing was folded.
        """
        with self.connect() as conn:
            tails = self.tails(conn)
            for entry in entries:
                self.apply_in(conn, entry, tails=tails)
            tails.flush()

    @contextmanager
    def folding(self) -> Iterator[PostgresFold]:
        """A batch of the request consumer in one transaction (:class:`~sagacity.ports.
        RequestFold`): the sagas' tails are flushed before it commits."""
        with self.connect() as conn:
            batch = PostgresFold(self, conn, self.tails(conn))
            yield batch
            batch.tails.flush()

    def tails(self, conn: psycopg.Connection[Any]) -> Tails:
        """The sagas' tails as ``conn``'s transaction sees them (flush before it commits)."""
        return Tails(conn, self.topic)

    def apply_in(
        self,
        conn: psycopg.Connection[Any],
        entry: JournalEntry,
        *,
        tails: Tails,
        saga_id: str | None = None,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | None:
        """:func:`apply_entry` for this store's topic and verifier, in ``conn``'s transaction."""
        return apply_entry(
            conn,
            entry,
            topic=self.topic,
            counts=self._counts,
            extends=self._extends,
            tails=tails,
            saga_id=saga_id,
            placed=placed,
            prefix=prefix,
            position=position,
            seen_at_us=self._clock(),
        )

    def fold_message(
        self,
        conn: psycopg.Connection[Any],
        entry: JournalEntry,
        *,
        tails: Tails,
        saga_id: str,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | Fault | None:
        """:meth:`apply_in` for one message of the topic, isolated from the rest of the
        batch: when the database refuses the values it writes (a value out of a column's
        range, a key too large for an index; :func:`refuses_the_row`), what it wrote is
        rolled back (a savepoint), its saga's tail is left where it was, and it is
        quarantined with kind :data:`REFUSED_BY_DATABASE` and the database's reason.  The
        batch and the position go on: one message's values never stall the partition.  So
        is an event of a saga whose kept events no longer read back (kind
        ``unreadable_kept_events``: the table was written by someone else).

        Raises:
            psycopg.Error: any other database failure (the batch is read again).
        """
        tails.get(saga_id)  # the saga's lock and tail, taken outside what may be undone
        mark = tails.mark(saga_id)
        try:
            with conn.transaction():
                return self.apply_in(
                    conn,
                    entry,
                    tails=tails,
                    saga_id=saga_id,
                    placed=placed,
                    prefix=prefix,
                    position=position,
                )
        except psycopg.Error as exc:
            if not refuses_the_row(exc):
                raise
            fault = Fault(kind=REFUSED_BY_DATABASE, detail=_first_line(exc))
        except SerializationError as exc:
            # A kept event of the saga that no longer reads back (the table was written by
            # hand): the saga cannot be folded here, which is its fate, not the batch's.
            fault = Fault(kind=UNREADABLE_KEPT_EVENTS, detail=exc.message)
        tails.restore(saga_id, mark)
        self.quarantine_fault(conn, entry, fault, saga_id=saga_id, position=position)
        return fault

    def quarantine_fault(
        self,
        conn: psycopg.Connection[Any],
        entry: JournalEntry,
        fault: Fault,
        *,
        saga_id: str,
        position: tuple[int, int] | None,
    ) -> bool:
        """Keep ``entry`` in the quarantine with ``fault`` (its own savepoint); ``False`` when
        the database refuses even that row (its saga id too large for the index): the caller
        then logs and counts it, and the position goes on all the same.

        Raises:
            psycopg.Error: any other database failure.
        """
        try:
            with conn.transaction():
                quarantine(conn, self.topic, saga_id, entry, fault, position=position)
        except psycopg.Error as exc:
            if not refuses_the_row(exc):
                raise
            return False
        return True

    def apply_chain_in(
        self, conn: psycopg.Connection[Any], saga_id: str, entries: Sequence[JournalEntry]
    ) -> None:
        """Fold ``entries``, the saga's chain as the journal's reader accepted it (from its
        first event), in ``conn``'s transaction: what the tail already holds is skipped, the
        rest judged and folded as the consumer folds the topic.  An event that does not
        extend the stored tail (the table and the journal disagree) is quarantined."""
        tails = self.tails(conn)
        previous: Tail | None = None
        for entry in entries:
            before = previous
            previous = Tail(seq=entry.seq, hash=entry.hash)
            held = tails.get(saga_id)
            if held is not None and entry.seq <= held.seq:
                continue
            self.apply_in(conn, entry, tails=tails, saga_id=saga_id, prefix=_constant(before))
        tails.flush()

    def quarantined(
        self, *, saga_id: str | None = None, limit: int = 500
    ) -> list[QuarantinedEvent]:
        """Events refused by the acceptance rule, oldest first (of one saga, or all)."""
        with self.connect() as conn:
            return quarantined(conn, self.topic, saga_id=saga_id, limit=limit)

    # -- reading ----------------------------------------------------------------------------
    def get(self, saga_id: str, seq: int) -> RequestRow | None:
        """The row of one request, if materialised."""
        with self.connect() as conn:
            return self.get_in(conn, saga_id, seq)

    def get_in(
        self, conn: psycopg.Connection[Any], saga_id: str, seq: int, *, lock: bool = False
    ) -> RequestRow | None:
        """The row, read in ``conn``'s transaction; ``lock`` takes the saga's lock (that folding
        takes, :func:`lock_saga`) and then the row's (FOR UPDATE)."""
        query = (
            "SELECT * FROM sagacity_approval_request WHERE topic = %s AND saga_id = %s AND seq = %s"
        )
        if lock:
            lock_saga(conn, self.topic, saga_id)
            query += " FOR UPDATE"
        record = conn.execute(query, (self.topic, saga_id, seq)).fetchone()
        return row_of(record) if record is not None else None

    def deciding(
        self, *, lock_timeout_s: float | None = None
    ) -> AbstractContextManager[PostgresDecision]:
        """A decision's unit of work: one transaction (:func:`._decision.deciding`)."""
        return deciding(self, lock_timeout_s=lock_timeout_s)

    def requests(
        self,
        *,
        states: Sequence[str] = OPEN_STATES,
        tools: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[RequestRow]:
        """Requests in ``states`` (open by default), oldest first; ``tools`` filters by tool."""
        with self.connect() as conn:
            if tools is None:
                records = conn.execute(
                    """SELECT * FROM sagacity_approval_request
                       WHERE topic = %s AND state = ANY(%s)
                       ORDER BY requested_at_us, saga_id, seq LIMIT %s""",
                    (self.topic, list(states), limit),
                ).fetchall()
            else:
                records = conn.execute(
                    """SELECT * FROM sagacity_approval_request
                       WHERE topic = %s AND state = ANY(%s) AND tool = ANY(%s)
                       ORDER BY requested_at_us, saga_id, seq LIMIT %s""",
                    (self.topic, list(states), list(tools), limit),
                ).fetchall()
        return [row_of(r) for r in records]

    def attention(self, *, limit: int = 500) -> list[AttentionRow]:
        """Sagas of this topic whose last run ended ``COMPENSATION_FAILED``, oldest first."""
        with self.connect() as conn:
            return attention_rows(conn, topic=self.topic, limit=limit)

    def decided(self, *, since_us: int) -> list[RequestRow]:
        """Requests of this topic decided (approved, rejected, expired) at or after
        ``since_us``."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %s AND decided_at_us >= %s ORDER BY decided_at_us""",
                (self.topic, since_us),
            ).fetchall()
        return [row_of(r) for r in records]

    def closed(self, states: Sequence[str], *, since_us: int, limit: int = 200) -> list[RequestRow]:
        """Requests of this topic closed in ``states`` at or after ``since_us``, newest
        first."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %s AND state = ANY(%s) AND closed_at_us >= %s
                   ORDER BY closed_at_us DESC LIMIT %s""",
                (self.topic, list(states), since_us, limit),
            ).fetchall()
        return [row_of(r) for r in records]

    def overdue(self, now_us: int, ttl_us: int | None, *, limit: int = 100) -> list[RequestRow]:
        """Open requests past their deadline: :func:`sagacity.gate._requests.deadline_us` in SQL
        plus the verified extensions the fold counted, in ``numeric`` so that no time a writer
        chose overflows the sum."""
        with self.connect() as conn:
            records = conn.execute(
                """SELECT * FROM sagacity_approval_request
                   WHERE topic = %(topic)s AND state IN ('pending', 'approved')
                     AND LEAST(expires_at_us::numeric,
                               LEAST(requested_at_us, COALESCE(seen_at_us, requested_at_us))
                                   ::numeric + %(ttl)s::numeric)
                         + GREATEST(extended_by_us, 0)::numeric < %(now)s
                   ORDER BY requested_at_us LIMIT %(limit)s""",
                {"topic": self.topic, "ttl": ttl_us, "now": now_us, "limit": limit},
            ).fetchall()
        return [row_of(r) for r in records]

    def stats(self, *, now_us: int, window_s: float) -> GateStats:
        """Gate metrics for decisions journaled in the last ``window_s`` seconds."""
        since = now_us - int(window_s * 1_000_000)
        with self.connect() as conn:
            decided = conn.execute(
                """SELECT
                     count(*) FILTER (WHERE decision = 'approved') AS approved,
                     count(*) FILTER (WHERE decision = 'rejected') AS rejected,
                     count(*) FILTER (WHERE decision = 'expired') AS expired,
                     percentile_cont(0.5) WITHIN GROUP
                         (ORDER BY decided_at_us::float8 - requested_at_us::float8)
                         FILTER (WHERE decision IN ('approved', 'rejected')) AS p50,
                     percentile_cont(0.95) WITHIN GROUP
                         (ORDER BY decided_at_us::float8 - requested_at_us::float8)
                         FILTER (WHERE decision IN ('approved', 'rejected')) AS p95
                   FROM sagacity_approval_request WHERE topic = %s AND decided_at_us >= %s""",
                (self.topic, since),
            ).fetchone()
            waiting = conn.execute(
                """SELECT count(*) AS pending, min(requested_at_us) AS oldest
                   FROM sagacity_approval_request
                   WHERE topic = %s AND state IN ('pending', 'approved')""",
                (self.topic,),
            ).fetchone()
        assert decided is not None
        assert waiting is not None
        oldest = waiting["oldest"]
        return GateStats(
            window_s=window_s,
            approved=decided["approved"],
            rejected=decided["rejected"],
            expired=decided["expired"],
            pending=waiting["pending"],
            oldest_pending_age_s=(now_us - oldest) / 1e6 if oldest is not None else None,
            latency_p50_s=decided["p50"] / 1e6 if decided["p50"] is not None else None,
            latency_p95_s=decided["p95"] / 1e6 if decided["p95"] is not None else None,
        )

    # -- consumer positions -----------------------------------------------------------------
    @staticmethod
    def offsets_in(conn: psycopg.Connection[Any], topic: str) -> dict[int, int]:
        """The next offset to read per partition of ``topic``."""
        records = conn.execute(
            "SELECT partition, next_offset FROM sagacity_approval_offset WHERE topic = %s",
            (topic,),
        ).fetchall()
        return {r["partition"]: r["next_offset"] for r in records}

    def offsets(self, topic: str) -> dict[int, int]:
        """:meth:`offsets_in` in a transaction of its own."""
        with self.connect() as conn:
            return self.offsets_in(conn, topic)

    @staticmethod
    def store_offset(
        conn: psycopg.Connection[Any], topic: str, partition: int, next_offset: int
    ) -> None:
        """Record the consumer's position, in the same transaction as the rows it produced."""
        conn.execute(
            """INSERT INTO sagacity_approval_offset (topic, partition, next_offset)
               VALUES (%s, %s, %s)
               ON CONFLICT (topic, partition) DO UPDATE
               SET next_offset = GREATEST(sagacity_approval_offset.next_offset,
                                          EXCLUDED.next_offset)""",
            (topic, partition, next_offset),
        )


class PostgresFold:
    """One batch of the request consumer on ``store``'s connection ``conn``
    (:class:`~sagacity.ports.RequestFold`)."""

    def __init__(
        self, store: PostgresRequestStore, conn: psycopg.Connection[Any], tails: Tails
    ) -> None:
        self._store = store
        self._conn = conn
        self.tails = tails

    def fold(
        self,
        entry: JournalEntry,
        *,
        saga_id: str,
        placed: bool = True,
        prefix: Callable[[], Tail | None] | None = None,
        position: tuple[int, int] | None = None,
    ) -> Refusal | Fault | None:
        """:meth:`PostgresRequestStore.fold_message` in this batch."""
        return self._store.fold_message(
            self._conn,
            entry,
            tails=self.tails,
            saga_id=saga_id,
            placed=placed,
            prefix=prefix,
            position=position,
        )

    def quarantine(
        self, entry: JournalEntry, fault: Fault, *, saga_id: str, position: tuple[int, int] | None
    ) -> bool:
        """:meth:`PostgresRequestStore.quarantine_fault` in this batch."""
        return self._store.quarantine_fault(
            self._conn, entry, fault, saga_id=saga_id, position=position
        )

    def store_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """The consumer's position on ``topic``, in this batch."""
        self._store.store_offset(self._conn, topic, partition, next_offset)
