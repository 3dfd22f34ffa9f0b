"""The archive as an erasure clears it (:class:`~sagacity.ports.ErasableArchive`, docs/adr/
0019-erasure.md §4): ``sgc_erase_saga`` clears a form-2 saga's openings and quarantined bytes
in one transaction and logs the erasure in ``archive_erasure``, which is read back here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from sagacity.errors import ArchiveSchemaError, ErasureRefusedError, PersistenceError
from sagacity.ports import ArchiveErasure
from sagacity.postgres._archive import archive_errors as mapped_errors
from sagacity.postgres._archive import check_schema
from sagacity.postgres._archive_schema import ERASURE_VERSION
from sagacity.postgres._connect import connect as _connect
from sagacity.postgres._statistics import refresh_statistics

__all__ = [
    "FORM_ONE_REFUSED",
    "ArchiveEraser",
    "ErasureRecord",
    "archived_count",
    "erase_in_archive",
    "erasure_records",
]


def connect(conninfo: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection to the archive's database (errors mapped); the caller closes it."""
    return _connect(
        conninfo, autocommit=autocommit, timeout=10.0, action="connect to the archive database"
    )


FORM_ONE_REFUSED = "SGC02"
"""The SQLSTATE ``sgc_erase_saga`` raises for a saga with form-1 rows."""


@dataclass(frozen=True, kw_only=True)
class ErasureRecord:
    """A row of ``archive_erasure``."""

    saga_id: str
    actor: str
    reason: str
    key_id: str | None
    erased: Mapping[int, tuple[str, ...]]
    quarantined: int
    erased_at: datetime


def _by_seq(value: Any) -> dict[int, tuple[str, ...]]:
    raw = json.loads(value) if isinstance(value, str) else value
    return {int(seq): tuple(fields) for seq, fields in sorted(raw.items(), key=_seq_key)}


def _seq_key(item: tuple[str, Any]) -> int:
    return int(item[0])


def _require_version(conn: psycopg.Connection[Any]) -> int:
    version = check_schema(conn)
    if not conn.autocommit:
        conn.rollback()
    if version < ERASURE_VERSION:
        raise ArchiveSchemaError(
            f"the archive is at schema version {version}; erasure needs version "
            f"{ERASURE_VERSION} (start the archiver, or run 'sagacity archive migrate')"
        )
    return version


def erase_in_archive(
    conn: psycopg.Connection[Any],
    saga_id: str,
    *,
    actor: str,
    reason: str,
    key_id: str | None = None,
) -> ArchiveErasure:
    """Clear the saga's openings and quarantined bytes in the archive and log the erasure,
    in one transaction; idempotent (a second call clears nothing and logs nothing).

    Raises:
        ErasureRefusedError: the saga has form-1 rows (nothing was changed).
        ArchiveSchemaError: the archive predates erasure (schema 7).
        PersistenceError: the database refused or could not be reached.
    """
    _require_version(conn)
    try:
        with mapped_errors("erase a saga in the archive"), conn.transaction():
            row = conn.execute(
                "SELECT sgc_erase_saga(%s, %s, %s, %s)::text", (saga_id, actor, reason, key_id)
            ).fetchone()
    except PersistenceError as exc:
        cause = exc.__cause__
        if isinstance(cause, psycopg.Error) and cause.sqlstate == FORM_ONE_REFUSED:
            raise ErasureRefusedError(
                f"saga {saga_id!r} is in chain form 1 (written without keys, or before chain "
                "form 2): its events hash their data in clear, so erasing it would break its "
                "chain; nothing was erased",
                saga_id=saga_id,
            ) from exc
        raise
    assert row is not None
    done = json.loads(row[0])
    return ArchiveErasure(
        saga_id=saga_id,
        erased=_by_seq(done["erased"]),
        quarantined=int(done["quarantined"]),
        logged=bool(done["logged"]),
        rows=int(done["rows"]),
    )


def archived_count(conn: psycopg.Connection[Any], saga_id: str) -> int:
    """The saga's rows in the archive.

    Raises:
        ArchiveSchemaError: the connection reaches no archive.
    """
    check_schema(conn)
    with mapped_errors("count a saga's archived events"):
        row = conn.execute(
            "SELECT count(*) FROM side_effect_journal WHERE saga_id = %s", (saga_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def erasure_records(
    conn: psycopg.Connection[Any], saga_id: str | None = None
) -> list[ErasureRecord]:
    """The logged erasures (of one saga, or all), oldest first; none before schema 7."""
    version = check_schema(conn)
    if version < ERASURE_VERSION:
        return []
    where, params = ("WHERE saga_id = %s", (saga_id,)) if saga_id is not None else ("", ())
    with mapped_errors("read the erasure log"):
        rows = conn.execute(
            "SELECT saga_id, actor, reason, key_id, erased::text, quarantined, erased_at"  # noqa: S608
            f" FROM archive_erasure {where} ORDER BY id",
            params,
        ).fetchall()
    return [
        ErasureRecord(
            saga_id=r[0],
            actor=r[1],
            reason=r[2],
            key_id=r[3],
            erased=_by_seq(r[4]),
            quarantined=int(r[5]),
            erased_at=r[6],
        )
        for r in rows
    ]


class ArchiveEraser:
    """:class:`~sagacity.ports.ErasableArchive` on the archive at ``conninfo``: each call on a
    connection of its own."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo

    def archived(self, saga_id: str) -> int:
        """The saga's rows in the archive (:func:`archived_count`)."""
        with connect(self._conninfo, autocommit=True) as conn:
            return archived_count(conn, saga_id)

    def recorded_key_id(self, saga_id: str) -> str | None:
        """The KEK id the saga's first logged erasure that names one recorded."""
        with connect(self._conninfo, autocommit=True) as conn:
            records = erasure_records(conn, saga_id)
        return next((r.key_id for r in records if r.key_id), None)

    def erase(self, saga_id: str, *, actor: str, reason: str, key_id: str) -> ArchiveErasure:
        """:func:`erase_in_archive`, then the cleared columns' statistics re-sampled (no
        sample of the values stays in the planner's statistics)."""
        with connect(self._conninfo) as conn:
            done = erase_in_archive(conn, saga_id, actor=actor, reason=reason, key_id=key_id)
        refresh_statistics(self._conninfo, None)
        return done
