"""The archive's audit bundles for the approvals console (:class:`~sagacity.ports.
ArchiveBundles`): built here, where the commands assemble the services, since the bundle is
the archive service's (:func:`sagacity.consumers.archive.export_bundle`) and one service does
not import another."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sagacity.ports import Dependencies
from sagacity.postgres import connect, mapped_errors
from sagacity.signing._operator_signature import OperatorVerifier

if TYPE_CHECKING:
    from sagacity.consumers.approvals import ApprovalsSettings

_ACTION = "cannot read the archive"


class ArchiveExports:
    """Bundles from one archive database (``SAGACITY_ARCHIVE_DATABASE_URL``).

    Args:
        dsn: the archive's PostgreSQL.
        operator: the pinned operator keys an ``ERASED`` must be signed with to count in the
            verdict (``None``: counted unverified, docs/adr/0027-operator-signatures.md).
    """

    def __init__(self, dsn: str, *, operator: OperatorVerifier | None = None) -> None:
        self._dsn = dsn
        self._operator = operator

    def export(self, saga_id: str, out: Path) -> tuple[bool, str]:
        """Write the bundle; ``(ok, detail)`` of the archive's audit."""
        from sagacity.consumers.archive import export_bundle
        from sagacity.postgres.archive import PostgresSagaBundles

        with connect(self._dsn, timeout=5, action=_ACTION) as conn, mapped_errors(_ACTION):
            audit = export_bundle(PostgresSagaBundles(conn), saga_id, out, operator=self._operator)
        if audit.ok:
            return True, f"archive verifies {audit.events} events ({audit.checkpoints} signed)"
        return False, f"archive does NOT verify at seq {audit.bad_seq}: {audit.detail}"


def approvals_dependencies(settings: ApprovalsSettings) -> Dependencies:
    """The approvals service's dependencies (:func:`sagacity.compose.approvals_of`) with the
    bundles of the archive its settings name (:func:`with_archive`)."""
    from sagacity import compose

    return with_archive(compose.approvals_of(settings), settings.archive_database_url)


def with_archive(handed: Dependencies, archive_database_url: str | None) -> Dependencies:
    """``handed`` with the bundles of the archive ``archive_database_url`` names (unchanged
    when ``None``: the console shows no archive); an ``ERASED`` counts in the verdict when
    signed with the pinned operator key (``SAGACITY_OPERATOR_PUBLIC_KEY``)."""
    if not archive_database_url:
        return handed
    from sagacity.signing._operator_signature import verifier_from_env

    bundles = ArchiveExports(archive_database_url, operator=verifier_from_env())
    return replace(handed, archive_bundles=bundles)
