"""The copies of a saga's data the services keep in PostgreSQL beside the archive, as an erasure
finds and clears them (docs/adr/0019-erasure.md §4).

* the approvals service's requests (``sagacity_approval_request.payload``) and the events it
  keeps to fold them (``sagacity_approval_event.entry``: the values, salts and data attributes);
* the compensation service's claims (``sagacity_compensation_claims``: the undo's ``result``
  and ``error``);
* the console's attention queue (``sagacity_attention.detail``: a failed saga's error, when
  it ended with no dirty steps to name).

A table that does not exist (the service never ran on this database) is skipped.  Clearing is
idempotent.  The erase command's lock (:func:`erasure_lock`) serialises erasures of a saga.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from sagacity.ports import ServiceCopies
from sagacity.postgres._connect import connect
from sagacity.postgres._errors import mapped_errors

ERASE_LOCK = 0x5A6C
"""The first key of the advisory lock an erasure of a saga holds (the second: ``hashtext`` of
the saga id)."""

_REQUESTS = "sagacity_approval_request"
_EVENTS = "sagacity_approval_event"
_CLAIMS = "sagacity_compensation_claims"
_ATTENTION = "sagacity_attention"
ERASED_DETAIL = "data erased (docs/operations/erasure.md): the saga's chain says what happened"
"""What an erased saga's row of the attention queue says instead of its error."""

_DATA_ATTRIBUTES_OF = (
    "ARRAY(SELECT k FROM jsonb_object_keys(coalesce(entry->'commitments', '{}'::jsonb)) k"
    " WHERE k NOT IN ('payload', 'result', 'error'))"
)
"""The data attributes an event kept as JSON commits to (its commitments' other keys)."""


def table_exists(conn: psycopg.Connection[Any], table: str) -> bool:
    """``table`` exists in the connection's current schema."""
    return _exists(conn, table)


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute(
        "SELECT to_regclass(format('%%I.%%I', current_schema(), %s::text))", (table,)
    ).fetchone()
    return row is not None and row[0] is not None


def service_copies(conninfo: str, saga_id: str) -> ServiceCopies:
    """What the services' tables say about the saga's liveness: its pending approval requests
    and its compensation claims in flight.

    Raises:
        PersistenceError: the database could not be reached or refused.
    """
    with (
        connect(conninfo, action="read the services' tables") as conn,
        mapped_errors("read the services' tables"),
    ):
        in_flight = 0
        pending: tuple[int, ...] = ()
        if _exists(conn, _REQUESTS):
            pending = tuple(
                int(row[0])
                for row in conn.execute(
                    "SELECT seq FROM sagacity_approval_request"
                    " WHERE saga_id = %s AND state = 'pending' ORDER BY seq",
                    (saga_id,),
                )
            )
        if _exists(conn, _CLAIMS):
            row = conn.execute(
                "SELECT count(*) FROM sagacity_compensation_claims"
                " WHERE saga_id = %s AND status = 'CLAIMED'",
                (saga_id,),
            ).fetchone()
            in_flight = int(row[0]) if row else 0
    return ServiceCopies(
        pending_requests=len(pending), pending_seqs=pending, claims_in_flight=in_flight
    )


def clear_service_copies(conninfo: str, saga_id: str) -> ServiceCopies:
    """Clear the saga's data from the services' tables, in one transaction: request payloads
    become empty, kept events lose their values, salts and data attributes (their commitments
    stay, so they still fold and hash), claims lose their result and error, the attention
    queue's detail (which may be the saga's error) says the data was erased.

    Raises:
        PersistenceError: the database could not be reached or refused.
    """
    requests = events = claims = attention = 0
    with (
        connect(conninfo, action="clear the services' copies") as conn,
        mapped_errors("clear the services' copies"),
        conn.transaction(),
    ):
        if _exists(conn, _REQUESTS):
            requests = conn.execute(
                "UPDATE sagacity_approval_request SET payload = ''"
                " WHERE saga_id = %s AND payload <> ''",
                (saga_id,),
            ).rowcount
        if _exists(conn, _EVENTS):
            events = conn.execute(
                "UPDATE sagacity_approval_event SET entry = (entry - 'payload' - 'result'"  # noqa: S608
                " - 'error' - 'salts')"
                " || jsonb_build_object('payload', NULL, 'result', NULL, 'error', NULL)"
                " || CASE WHEN entry ? 'salts' THEN jsonb_build_object('salts', '{}'::jsonb)"
                " ELSE '{}'::jsonb END"
                " || jsonb_build_object('attributes', coalesce(entry->'attributes', '{}')"
                f" - {_DATA_ATTRIBUTES_OF})"
                " WHERE saga_id = %s AND (entry->>'payload' IS NOT NULL"
                " OR entry->>'result' IS NOT NULL OR entry->>'error' IS NOT NULL"
                " OR coalesce(entry->'salts', '{}'::jsonb) <> '{}'::jsonb"
                f" OR coalesce(entry->'attributes', '{{}}'::jsonb) ?| {_DATA_ATTRIBUTES_OF})",
                (saga_id,),
            ).rowcount
        if _exists(conn, _CLAIMS):
            claims = conn.execute(
                "UPDATE sagacity_compensation_claims SET result = NULL, error = NULL"
                " WHERE saga_id = %s AND (result IS NOT NULL OR error IS NOT NULL)",
                (saga_id,),
            ).rowcount
        if _exists(conn, _ATTENTION):
            attention = conn.execute(
                "UPDATE sagacity_attention SET detail = %s WHERE saga_id = %s AND detail <> %s",
                (ERASED_DETAIL, saga_id, ERASED_DETAIL),
            ).rowcount
    return ServiceCopies(requests=requests, events=events, claims=claims, attention=attention)


@contextmanager
def erasure_lock(conninfo: str, saga_id: str) -> Iterator[None]:
    """Hold the saga's erasure lock (a session advisory lock on ``conninfo``'s database) for
    the block: a second erasure of the saga waits, then finds the first one's work done.

    Raises:
        PersistenceError: the database could not be reached.
    """
    with (
        connect(conninfo, autocommit=True, action="take the erasure lock") as conn,
        mapped_errors("take the erasure lock"),
    ):
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (ERASE_LOCK, saga_id))
        try:
            yield
        finally:
            if not conn.closed and not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (ERASE_LOCK, saga_id))


class PostgresServiceTables:
    """The services' tables in the database at ``conninfo``
    (:class:`sagacity.ports.ServiceTables`)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo

    def copies(self, saga_id: str) -> ServiceCopies:
        """:func:`service_copies`."""
        return service_copies(self._conninfo, saga_id)

    def clear(self, saga_id: str) -> ServiceCopies:
        """:func:`clear_service_copies`, then the cleared columns' statistics re-sampled."""
        from sagacity.postgres._statistics import refresh_statistics  # it imports this module

        cleared = clear_service_copies(self._conninfo, saga_id)
        refresh_statistics(None, self._conninfo)  # no sample of the values
        return cleared

    def erasure_lock(self, saga_id: str) -> AbstractContextManager[None]:
        """:func:`erasure_lock`."""
        return erasure_lock(self._conninfo, saga_id)
