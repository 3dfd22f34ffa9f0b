"""The archived chains as the archive's tools read them: the ports
:class:`~sagacity.ports.ArchivedHeads` (a sweep's candidates) and
:class:`~sagacity.ports.ArchivedHashes` (a replay's comparison) on one connection."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import psycopg

from sagacity.ports import ArchivedHead
from sagacity.postgres.archive._db import check_schema, mapped_errors


class PostgresArchiveReads:
    """Reads of the archive on ``conn`` (the caller's connection, which it closes)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

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
