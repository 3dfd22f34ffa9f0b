"""The audit of erasures: the data keys destroyed against the ``ERASED`` events on the
archived chains (docs/adr/0019-erasure.md §4).

The archive's rows are append-only; ``sgc_erase_saga`` (archive schema 7) is the one path that
clears a form-2 saga's openings — the data values that have a commitment, the data
attributes, the salts — and its quarantined bytes, leaving every hash recomputable from the
commitments, and logs the erasure in ``archive_erasure``: its caller is the Postgres
adapter's :class:`sagacity.postgres.archive.ArchiveEraser` (the ``ErasableArchive`` port).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from sagacity.consumers.archive._story import ErasureRow, json_map
from sagacity.ports import ArchiveErasure as ArchiveErasure  # the port's value, exported
from sagacity.postgres.archive import check_schema, mapped_errors
from sagacity.privacy._withheld import ERASURE_EVENT, erasure_verdict
from sagacity.signing._operator_signature import OperatorVerifier


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
