"""The audit of erasures: the data keys destroyed against the ``ERASED`` events on the
archived chains (docs/adr/0019-erasure.md §4).

The archive's rows are append-only; ``sgc_erase_saga`` (archive schema 7) is the one path that
clears a form-2 saga's openings — the data values that have a commitment, the data
attributes, the salts — and its quarantined bytes, leaving every hash recomputable from the
commitments, and logs the erasure in ``archive_erasure``: its caller is the Postgres
adapter's :class:`sagacity.postgres.archive.ArchiveEraser` (the ``ErasableArchive`` port).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sagacity.consumers.archive._story import ErasureRow, json_map
from sagacity.ports import ArchiveErasure as ArchiveErasure  # the port's value, exported
from sagacity.ports import DestroyedKeyReads, ErasedEvent
from sagacity.privacy._withheld import erasure_verdict
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


def audit_erasures(
    keys: DestroyedKeyReads,
    saga_id: str | None = None,
    *,
    recorded: Collection[str] | None = None,
    sagas: int = 0,
    fields: int = 0,
    operator: OperatorVerifier | None = None,
) -> ErasureAudit:
    """Every destroyed data key (of one saga, or all) whose saga's chain records no erasure;
    ``keys`` (:class:`~sagacity.ports.DestroyedKeyReads`, the Postgres archive's
    ``PostgresArchiveReads``) reads them.

    Args:
        recorded: the sagas whose verified chain counts an erasure (``verify`` collects them
            as it walks the chains); ``None``: each destroyed key's saga's archived ``ERASED``
            rows are read and counted here (:func:`sagacity.privacy._withheld.erasure_verdict`, with
            ``operator``, the pinned operator keys).
        sagas / fields: the erasures counted on the chains, reported as they are.
    """
    found = keys.destroyed_keys(saga_id, with_erased=recorded is None)
    destroyed = [
        UnrecordedErasure(saga_id=k.saga_id, erased_at=k.erased_at, erased_by=k.erased_by)
        for k in found.keys
    ]
    erased = set(recorded) if recorded is not None else _on_record(found.erased, operator)
    return ErasureAudit(
        sagas=sagas,
        fields=fields,
        unrecorded=tuple(d for d in destroyed if d.saga_id not in erased),
        keys_unreadable=found.hidden,
    )


def _on_record(rows: Sequence[ErasedEvent], operator: OperatorVerifier | None) -> set[str]:
    """The sagas of ``rows`` (archived ``ERASED`` rows) whose erasure counts."""
    return {
        row.saga_id
        for row in rows
        if erasure_verdict(
            ErasureRow(
                saga_id=row.saga_id,
                seq=row.seq,
                event_type=row.event_type,
                prev_hash=row.prev_hash,
                actor=row.actor,
                recorded_at_us=row.recorded_at_us,
                attributes=json_map(row.attributes),
            ),
            operator,
        ).counts
    }
