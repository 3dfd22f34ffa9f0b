"""The database a Postgres archive contract runs on, and the connections a test opens there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg


class ArchiveDatabase:
    """``dsn`` for the test, and every connection it opens there (``conns``), closed after it."""

    dsn: str
    conns: list[psycopg.Connection[Any]]

    def on_database(self, dsn: str) -> Iterator[None]:
        """Run the test on ``dsn`` (a generator for an autouse fixture to ``yield from``)."""
        self.dsn = dsn
        self.conns = []
        yield
        for conn in self.conns:
            conn.close()
