"""The rows a saga's story is told from, on PostgreSQL: the select of every row's story
(:func:`story_query`), and the stories of what signing rounds signed, read for ``audit watch``
(the port :class:`~sagacity.ports.SignedStories`, :class:`PostgresSignedStories`).  The story
itself (the saga grammar, the data withheld) is the archive service's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from sagacity.postgres._archive_schema import FORMS_VERSION
from sagacity.postgres.archive._db import check_schema


def story_query(*, where: str, forms: bool, join: str = "") -> str:
    """The select of every row's story (``side_effect_journal j``), in saga order; ``where``
    and ``join`` are constant fragments."""
    form_columns = (
        ", CASE WHEN j.form = 2 THEN j.commitments::text END,"
        " CASE WHEN j.form = 2 THEN j.salts::text END"
        if forms
        else ", NULL, NULL"
    )
    return (
        "SELECT j.saga_id, j.seq, j.event_type, j.tool, j.actor, j.attributes::text,"  # noqa: S608
        # The grammar compares a resume's payload with its request's: only theirs travel,
        # as digests.
        " CASE WHEN j.payload IS NOT NULL AND (j.event_type = 'AWAITING_APPROVAL'"
        " OR (j.event_type = 'INTENT' AND j.attributes ? 'ref_seq'))"
        " THEN encode(sha256(convert_to(j.payload, 'UTF8')), 'hex') END,"
        " CASE WHEN j.event_type = 'SAGA_ENDED' THEN j.result END"
        # An erasure's operator signature covers its place in the chain and its time.
        " , CASE WHEN j.event_type = 'ERASED' THEN j.prev_hash END,"
        " CASE WHEN j.event_type = 'ERASED' THEN j.recorded_at_us END"
        f"{form_columns} FROM side_effect_journal j {join} {where}"
        ' ORDER BY j.saga_id COLLATE "C", j.seq'
    )


class PostgresSignedStories:
    """The stories of what signing rounds signed, on ``conn`` (the caller's connection)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    @contextmanager
    def signed_story_rows(self, round_ids: Sequence[int]) -> Iterator[Iterator[tuple[Any, ...]]]:
        """The story rows of every saga ``round_ids`` signed, up to the highest seq they
        signed, in saga then seq order, by a server-side cursor in a transaction of its own."""
        forms = check_schema(self._conn) >= FORMS_VERSION
        if not self._conn.autocommit:
            self._conn.rollback()
        signed = (
            "JOIN (SELECT saga_id, max(seq) AS seq FROM archive_checkpoint"
            " WHERE round_id = ANY(%(r)s) GROUP BY saga_id) c"
            " ON c.saga_id = j.saga_id AND j.seq <= c.seq"
        )
        query = story_query(where="", forms=forms, join=signed)
        with self._conn.transaction(), self._conn.cursor(name="sgc_watch_story") as cursor:
            cursor.itersize = 5_000
            cursor.execute(query, {"r": list(round_ids)})
            yield iter(cursor)
