"""Erasing a saga's data in the archive, and reading the log of erasures
(docs/adr/0019-erasure.md §4).

The archive's rows are append-only; ``sgc_erase_saga`` (archive schema 7) is the one path that
clears a form-2 saga's openings — the data values that have a commitment, the data
attributes, the salts — and its quarantined bytes, leaving every hash recomputable from the
commitments, and logs the erasure in ``archive_erasure``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from sagacity.consumers.archive._db import connect, mapped_errors
from sagacity.consumers.archive._story import ErasureRow, json_map
from sagacity.errors import ArchiveSchemaError, ErasureRefusedError, PersistenceError
from sagacity.ports import ArchiveErasure as ArchiveErasure  # the port's value, exported
from sagacity.postgres._archive import check_schema
from sagacity.postgres._archive_schema import ERASURE_VERSION
from sagacity.postgres._statistics import refresh_statistics
from sagacity.privacy._withheld import ERASURE_EVENT, erasure_verdict
from sagacity.signing._operator_signature import OperatorVerifier

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


@dataclass(frozen=True, kw_only=True)
class UnrecordedErasure:
    """A saga whose data key was destroyed while its chain, as archived, holds no ``ERASED``
    event: an erasure not sanctioned on the record (or not finished, or not archived yet)."""

    saga_id: str
    erased_at: datetime
    erased_by: str | None


@dataclass(frozen=True, kw_only=True)
class ErasureAudit:
    """What ``sagacity verify`` reports about erasures.

    Attributes:
        sagas: sagas whose chain records an erasure (an ``ERASED`` event it counts,
            :func:`sagacity.privacy._withheld.erasure_verdict`; never the ``archive_erasure`` log,
            which anyone with database access can write).
        fields: data fields those erasures list.
        unrecorded: destroyed keys without an ``ERASED`` event (``erasure_unrecorded``).
        keys_unreadable: the key table is there but this role may not read it: destroyed keys
            were not checked.
    """

    sagas: int = 0
    fields: int = 0
    unrecorded: tuple[UnrecordedErasure, ...] = ()
    keys_unreadable: bool = False


KEY_TABLE = "sagacity_data_keys"
"""The key store's table (:mod:`sagacity.postgres._keys`), read when it is in the same
schema as the archive."""


def audit_erasures(
    conn: psycopg.Connection[Any],
    saga_id: str | None = None,
    *,
    recorded: Collection[str] | None = None,
    sagas: int = 0,
    fields: int = 0,
    operator: OperatorVerifier | None = None,
) -> ErasureAudit:
    """Every destroyed data key (of one saga, or all) whose saga's chain records no erasure.

    Args:
        recorded: the sagas whose verified chain counts an erasure (``verify`` collects them
            as it walks the chains); ``None``: each destroyed key's saga's archived ``ERASED``
            rows are read and counted here (:func:`sagacity.privacy._withheld.erasure_verdict`, with
            ``operator``, the pinned operator keys).
        sagas / fields: the erasures counted on the chains, reported as they are.
    """
    check_schema(conn)
    # Only constant fragments are interpolated; the saga id is a bound parameter.
    one = "AND k.saga_id = %(s)s" if saga_id is not None else ""
    with mapped_errors("read the data keys"):
        found = conn.execute(
            "SELECT t IS NOT NULL, t IS NOT NULL AND has_table_privilege(t, 'SELECT') FROM"
            " (SELECT to_regclass(format('%%I.%%I', current_schema(), %(t)s::text)) t) k",
            {"t": KEY_TABLE},
        ).fetchone()
        unrecorded: list[UnrecordedErasure] = []
        keys_checked = found is not None and bool(found[1])
        keys_hidden = found is not None and bool(found[0]) and not keys_checked
        if keys_checked:
            rows = conn.execute(
                "SELECT k.saga_id, k.erased_at, k.erased_by FROM sagacity_data_keys k"  # noqa: S608
                f' WHERE k.erased_at IS NOT NULL {one} ORDER BY k.saga_id COLLATE "C"',
                {"s": saga_id},
            ).fetchall()
            destroyed = [
                UnrecordedErasure(saga_id=r[0], erased_at=r[1], erased_by=r[2]) for r in rows
            ]
            erased = (
                set(recorded)
                if recorded is not None
                else _erasures_on_record(conn, [d.saga_id for d in destroyed], operator)
            )
            unrecorded = [d for d in destroyed if d.saga_id not in erased]
    if not conn.autocommit:
        conn.rollback()
    return ErasureAudit(
        sagas=sagas, fields=fields, unrecorded=tuple(unrecorded), keys_unreadable=keys_hidden
    )


def _erasures_on_record(
    conn: psycopg.Connection[Any], saga_ids: list[str], operator: OperatorVerifier | None
) -> set[str]:
    """Those of ``saga_ids`` whose archived ``ERASED`` rows count as an erasure."""
    if not saga_ids:
        return set()
    rows = conn.execute(
        "SELECT saga_id, seq, event_type, prev_hash, actor, recorded_at_us, attributes::text"
        " FROM side_effect_journal WHERE saga_id = ANY(%s) AND event_type = %s",
        (saga_ids, ERASURE_EVENT.value),
    ).fetchall()
    return {
        str(row[0])
        for row in rows
        if erasure_verdict(
            ErasureRow(
                saga_id=str(row[0]),
                seq=int(row[1]),
                event_type=str(row[2]),
                prev_hash=str(row[3]),
                actor=row[4],
                recorded_at_us=int(row[5]),
                attributes=json_map(row[6]),
            ),
            operator,
        ).counts
    }
