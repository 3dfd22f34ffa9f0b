"""The archive as ``audit watch`` reads it, on PostgreSQL: the port
:class:`~sagacity.ports.WatchedArchive` (:class:`PostgresWatchedArchive`): the rounds
(:class:`~sagacity.postgres.archive.PostgresRoundLog`), the stories of what they signed and
the destroyed data keys, on one connection."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from sagacity.ports import DestroyedKeys
from sagacity.postgres.archive._reads import PostgresArchiveReads
from sagacity.postgres.archive._rounds import PostgresRoundLog
from sagacity.postgres.archive._stories import PostgresSignedStories


class PostgresWatchedArchive(PostgresRoundLog):
    """The archive on ``conn`` (the caller's connection, which it closes), as a watch reads
    it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(conn)
        self._stories = PostgresSignedStories(conn)
        self._reads = PostgresArchiveReads(conn)

    def signed_story_rows(
        self, round_ids: Sequence[int]
    ) -> AbstractContextManager[Iterator[tuple[Any, ...]]]:
        """The story rows of what ``round_ids`` signed (:class:`PostgresSignedStories`)."""
        return self._stories.signed_story_rows(round_ids)

    def destroyed_keys(
        self, saga_id: str | None = None, *, with_erased: bool = False
    ) -> DestroyedKeys:
        """The destroyed data keys (:class:`PostgresArchiveReads`)."""
        return self._reads.destroyed_keys(saga_id, with_erased=with_erased)
